#include "server/http/openai_json.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/limits.h"

namespace ckv::server::http {
namespace {

using Json = nlohmann::json;

// The status payload that carries the offending field to ErrorBody.
constexpr char kParamPayload[] = "clusterkv.http/param";

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  absl::Status s =
      absl::InvalidArgumentError(absl::StrCat("'", field, "' ", what));
  s.SetPayload(kParamPayload, absl::Cord(field));
  return s;
}

// Deepest nesting of objects and arrays outside strings, counted without
// parsing (so that a hostile body cannot exhaust the parser's memory).
int JsonDepth(absl::string_view body) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

bool IsNull(const Json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null();
}

absl::Status ReadNumber(const Json& body, const char* key, double lo, double hi,
                        std::optional<float>* out) {
  if (IsNull(body, key)) return absl::OkStatus();
  const Json& v = body.at(key);
  if (!v.is_number()) return FieldError(key, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return FieldError(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  }
  *out = static_cast<float>(d);
  return absl::OkStatus();
}

absl::Status ReadMaxTokens(const Json& body, const char* key,
                           std::optional<int>* out) {
  if (IsNull(body, key)) return absl::OkStatus();
  const Json& v = body.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
      v.get<int64_t>() > std::numeric_limits<int>::max()) {
    return FieldError(key, "must be a positive integer");
  }
  *out = static_cast<int>(v.get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadStop(const Json& body, OpenAiRequest& r) {
  if (IsNull(body, "stop")) return absl::OkStatus();
  const Json& v = body.at("stop");
  std::vector<std::string> stop;
  if (v.is_string()) {
    stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const Json& s : v) {
      if (!s.is_string()) return FieldError("stop", "must hold strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return FieldError("stop", "must be a string or a list of strings");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return FieldError("stop", "must not hold empty strings");
  }
  r.stop = std::move(stop);
  return absl::OkStatus();
}

absl::Status ReadSamplingFields(const Json& body, OpenAiRequest& r) {
  if (auto s = ReadMaxTokens(body, "max_tokens", &r.max_tokens); !s.ok()) {
    return s;
  }
  if (!r.max_tokens.has_value()) {  // the chat API's newer name
    if (auto s = ReadMaxTokens(body, "max_completion_tokens", &r.max_tokens);
        !s.ok()) {
      return s;
    }
  }
  if (auto s = ReadNumber(body, "temperature", 0.0, 2.0, &r.temperature);
      !s.ok()) {
    return s;
  }
  if (auto s = ReadNumber(body, "top_p", 0.0, 1.0, &r.top_p); !s.ok()) {
    return s;
  }
  if (!IsNull(body, "seed")) {
    const Json& v = body.at("seed");
    if (!v.is_number_integer()) return FieldError("seed", "must be an integer");
    r.seed = v.is_number_unsigned() ? v.get<uint64_t>()
                                    : static_cast<uint64_t>(v.get<int64_t>());
  }
  return ReadStop(body, r);
}

absl::Status ReadCommonFields(const Json& body, OpenAiRequest& r) {
  if (!IsNull(body, "model")) {
    if (!body.at("model").is_string()) {
      return FieldError("model", "must be a string");
    }
    r.model = body.at("model").get<std::string>();
  }
  if (!IsNull(body, "n")) {
    const Json& n = body.at("n");
    if (!n.is_number_integer() || n.get<int64_t>() != 1) {
      return FieldError("n", "must be 1 (one choice per request)");
    }
  }
  if (!IsNull(body, "stream")) {
    if (!body.at("stream").is_boolean()) {
      return FieldError("stream", "must be a boolean");
    }
    r.stream = body.at("stream").get<bool>();
  }
  if (!IsNull(body, "stream_options")) {
    const Json& o = body.at("stream_options");
    if (!o.is_object())
      return FieldError("stream_options", "must be an object");
    if (!IsNull(o, "include_usage")) {
      if (!o.at("include_usage").is_boolean()) {
        return FieldError("stream_options.include_usage", "must be a boolean");
      }
      r.include_usage = o.at("include_usage").get<bool>();
    }
  }
  return ReadSamplingFields(body, r);
}

absl::Status ReadPromptIds(const Json& ids, OpenAiRequest& r) {
  for (const Json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return FieldError("prompt", "token ids must be integers >= 0");
    }
    r.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  r.has_prompt_ids = true;
  return absl::OkStatus();
}

// A string, a list of one string, or a list of token ids.
absl::Status ReadPrompt(const Json& body, OpenAiRequest& r) {
  if (IsNull(body, "prompt")) return FieldError("prompt", "is required");
  const Json& p = body.at("prompt");
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    return absl::OkStatus();
  }
  if (!p.is_array()) {
    return FieldError("prompt", "must be a string or a list");
  }
  if (p.size() == 1 && p[0].is_string()) {
    r.prompt = p[0].get<std::string>();
    return absl::OkStatus();
  }
  if (!p.empty() && (p[0].is_string() || p[0].is_array())) {
    return FieldError("prompt",
                      "must hold one prompt (batches: one request each)");
  }
  return ReadPromptIds(p, r);
}

// content: a string, null, or a list of {"type": "text", "text": ...} parts.
absl::StatusOr<std::string> MessageContent(const Json& m) {
  if (IsNull(m, "content")) return std::string();
  const Json& c = m.at("content");
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    return FieldError("messages", "content must be a string or a list");
  }
  std::string text;
  for (const Json& part : c) {
    if (!part.is_object() || !part.contains("type") ||
        part.at("type") != "text" || !part.contains("text") ||
        !part.at("text").is_string()) {
      return FieldError("messages",
                        "content parts must be {\"type\": \"text\", "
                        "\"text\": string}");
    }
    text += part.at("text").get<std::string>();
  }
  return text;
}

absl::Status ReadMessages(const Json& body, OpenAiRequest& r) {
  if (IsNull(body, "messages") || !body.at("messages").is_array() ||
      body.at("messages").empty()) {
    return FieldError("messages", "must be a non-empty list");
  }
  for (const Json& m : body.at("messages")) {
    if (!m.is_object() || !m.contains("role") || !m.at("role").is_string()) {
      return FieldError("messages", "each message needs a string 'role'");
    }
    auto content = MessageContent(m);
    if (!content.ok()) return content.status();
    r.messages.push_back({m.at("role").get<std::string>(), *content});
  }
  return absl::OkStatus();
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return "server_error";
  }
}

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json HeadJson(const ResponseHead& head, const char* object) {
  return Json{{"id", head.id},
              {"object", object},
              {"created", head.created},
              {"model", head.model}};
}

Json UsageJson(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body,
                                                 Endpoint endpoint) {
  if (JsonDepth(body) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body nests deeper than ", kMaxJsonDepth, " levels"));
  }
  Json j = Json::parse(body.begin(), body.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        "request body is not valid JSON (or not valid UTF-8)");
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  OpenAiRequest r;
  r.endpoint = endpoint;
  if (auto s = ReadCommonFields(j, r); !s.ok()) return s;
  absl::Status s =
      endpoint == Endpoint::kChat ? ReadMessages(j, r) : ReadPrompt(j, r);
  if (!s.ok()) return s;
  return r;
}

SamplingParams ApplySampling(const SamplingParams& base,
                             const OpenAiRequest& r) {
  SamplingParams s = base;
  if (r.max_tokens) s.max_tokens = *r.max_tokens;
  if (r.temperature) s.temperature = *r.temperature;
  if (r.top_p) s.top_p = *r.top_p;
  if (r.seed) s.seed = *r.seed;
  if (r.stop) s.stop = *r.stop;
  return s;
}

std::string RenderRawConversation(const std::vector<ChatTurn>& messages) {
  std::string text;
  for (const ChatTurn& m : messages) {
    absl::StrAppend(&text, m.role, ": ", m.content, "\n");
  }
  text += "assistant:";
  return text;
}

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status, absl::string_view param) {
  std::string field(param);
  if (field.empty()) {
    if (auto p = status.GetPayload(kParamPayload)) field = std::string(*p);
  }
  std::string code =
      absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  if (auto limit = LimitOf(status)) code = LimitName(limit->limit);
  Json e{{"message", std::string(status.message())},
         {"type", ErrorType(HttpStatusOf(status.code()))},
         {"param", field.empty() ? Json(nullptr) : Json(field)},
         {"code", code}};
  return Dump(Json{{"error", e}});
}

std::string ModelsBody(absl::string_view model_id, int64_t created) {
  Json model{{"id", std::string(model_id)},
             {"object", "model"},
             {"created", created},
             {"owned_by", "clusterkv"}};
  return Dump(Json{{"object", "list"}, {"data", Json::array({model})}});
}

std::string CompletionBody(const ResponseHead& head, absl::string_view text,
                           absl::string_view finish_reason,
                           const Usage& usage) {
  const bool chat = head.endpoint == Endpoint::kChat;
  Json choice{{"index", 0}, {"finish_reason", std::string(finish_reason)}};
  if (chat) {
    choice["message"] =
        Json{{"role", "assistant"}, {"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
    choice["logprobs"] = nullptr;
  }
  Json j = HeadJson(head, chat ? "chat.completion" : "text_completion");
  j["choices"] = Json::array({choice});
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string ChunkBody(const ResponseHead& head, absl::string_view text,
                      bool first, absl::string_view finish_reason) {
  const bool chat = head.endpoint == Endpoint::kChat;
  Json choice{{"index", 0},
              {"finish_reason", finish_reason.empty()
                                    ? Json(nullptr)
                                    : Json(std::string(finish_reason))}};
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) {
      delta["content"] = std::string(text);
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
    choice["logprobs"] = nullptr;
  }
  Json j = HeadJson(head, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array({choice});
  return Dump(j);
}

std::string UsageChunkBody(const ResponseHead& head, const Usage& usage) {
  const bool chat = head.endpoint == Endpoint::kChat;
  Json j = HeadJson(head, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string SseEvent(absl::string_view json) {
  return absl::StrCat("data: ", json, "\n\n");
}

}  // namespace ckv::server::http
