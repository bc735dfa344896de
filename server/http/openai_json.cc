#include "server/http/openai_json.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/constraint_convert.h"
#include "server/http/openai_tools.h"
#include "server/limits.h"

namespace ckv::server::http {
namespace {

// Key order kept: a schema's properties and a tool's JSON stay as sent.
using Json = nlohmann::ordered_json;

// The status payloads that carry the offending field and the error code to
// ErrorBody.
constexpr char kParamPayload[] = "clusterkv.http/param";
constexpr char kCodePayload[] = "clusterkv.http/code";

absl::Status QuotedFieldError(absl::string_view field, absl::string_view what) {
  return FieldError(field, absl::StrCat("'", field, "' ", what));
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
  if (!v.is_number()) return QuotedFieldError(key, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return QuotedFieldError(key,
                            absl::StrCat("must be in [", lo, ", ", hi, "]"));
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
    return QuotedFieldError(key, "must be a positive integer");
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
      if (!s.is_string()) return QuotedFieldError("stop", "must hold strings");
      stop.push_back(s.get<std::string>());
    }
  } else {
    return QuotedFieldError("stop", "must be a string or a list of strings");
  }
  for (const std::string& s : stop) {
    if (s.empty())
      return QuotedFieldError("stop", "must not hold empty strings");
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
    if (!v.is_number_integer())
      return QuotedFieldError("seed", "must be an integer");
    r.seed = v.is_number_unsigned() ? v.get<uint64_t>()
                                    : static_cast<uint64_t>(v.get<int64_t>());
  }
  return ReadStop(body, r);
}

// Chat: logprobs (bool) + top_logprobs (0..20); completions: logprobs
// (0..5) + echo.
absl::Status ReadLogprobFields(const Json& body, OpenAiRequest& r) {
  if (r.endpoint == Endpoint::kChat) {
    bool on = false;
    if (!IsNull(body, "logprobs")) {
      if (!body.at("logprobs").is_boolean()) {
        return QuotedFieldError("logprobs", "must be a boolean");
      }
      on = body.at("logprobs").get<bool>();
    }
    int top = 0;
    if (!IsNull(body, "top_logprobs")) {
      const Json& v = body.at("top_logprobs");
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > 20) {
        return QuotedFieldError("top_logprobs",
                                "must be an integer in [0, 20]");
      }
      if (!on) {
        return QuotedFieldError("top_logprobs", "needs 'logprobs' set to true");
      }
      top = static_cast<int>(v.get<int64_t>());
    }
    r.logprobs = on ? top : -1;
    return absl::OkStatus();
  }
  if (!IsNull(body, "logprobs")) {
    const Json& v = body.at("logprobs");
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > 5) {
      return QuotedFieldError("logprobs", "must be an integer in [0, 5]");
    }
    r.logprobs = static_cast<int>(v.get<int64_t>());
  }
  if (!IsNull(body, "echo")) {
    if (!body.at("echo").is_boolean()) {
      return QuotedFieldError("echo", "must be a boolean");
    }
    r.echo = body.at("echo").get<bool>();
  }
  return absl::OkStatus();
}

absl::Status ReadCommonFields(const Json& body, OpenAiRequest& r) {
  if (auto s = ReadLogprobFields(body, r); !s.ok()) return s;
  if (!IsNull(body, "model")) {
    if (!body.at("model").is_string()) {
      return QuotedFieldError("model", "must be a string");
    }
    r.model = body.at("model").get<std::string>();
  }
  if (!IsNull(body, "n")) {
    const Json& n = body.at("n");
    if (!n.is_number_integer() || n.get<int64_t>() < 1) {
      return QuotedFieldError("n", "must be an integer >= 1");
    }
    r.n = static_cast<int>(
        std::min<uint64_t>(n.get<uint64_t>(), std::numeric_limits<int>::max()));
  }
  if (!IsNull(body, "stream")) {
    if (!body.at("stream").is_boolean()) {
      return QuotedFieldError("stream", "must be a boolean");
    }
    r.stream = body.at("stream").get<bool>();
  }
  if (!IsNull(body, "stream_options")) {
    const Json& o = body.at("stream_options");
    if (!o.is_object())
      return QuotedFieldError("stream_options", "must be an object");
    if (!IsNull(o, "include_usage")) {
      if (!o.at("include_usage").is_boolean()) {
        return QuotedFieldError("stream_options.include_usage",
                                "must be a boolean");
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
      return QuotedFieldError("prompt", "token ids must be integers >= 0");
    }
    r.prompt_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  r.has_prompt_ids = true;
  return absl::OkStatus();
}

// A string, a list of one string, or a list of token ids.
absl::Status ReadPrompt(const Json& body, OpenAiRequest& r) {
  if (IsNull(body, "prompt")) return QuotedFieldError("prompt", "is required");
  const Json& p = body.at("prompt");
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    return absl::OkStatus();
  }
  if (!p.is_array()) {
    return QuotedFieldError("prompt", "must be a string or a list");
  }
  if (p.size() == 1 && p[0].is_string()) {
    r.prompt = p[0].get<std::string>();
    return absl::OkStatus();
  }
  if (!p.empty() && (p[0].is_string() || p[0].is_array())) {
    return QuotedFieldError("prompt",
                            "must hold one prompt (batches: one request each)");
  }
  return ReadPromptIds(p, r);
}

// content: a string or a list of {"type": "text", "text": ...} parts;
// required (null only for an assistant message with tool_calls).
absl::StatusOr<std::string> MessageContent(const Json& m,
                                           const std::string& field,
                                           const std::string& role) {
  if (IsNull(m, "content")) {
    if (role == "assistant" && !IsNull(m, "tool_calls")) return std::string();
    return QuotedFieldError(field, "is required");
  }
  const Json& c = m.at("content");
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    return QuotedFieldError(field, "must be a string or a list of parts");
  }
  std::string text;
  for (const Json& part : c) {
    if (!part.is_object() || !part.contains("type") ||
        part.at("type") != "text" || !part.contains("text") ||
        !part.at("text").is_string()) {
      return QuotedFieldError(field,
                              "parts must be {\"type\": \"text\", "
                              "\"text\": string} (text only)");
    }
    text += part.at("text").get<std::string>();
  }
  return text;
}

bool KnownRole(absl::string_view role) {
  for (const char* r : {"system", "developer", "user", "assistant", "tool"}) {
    if (role == r) return true;
  }
  return false;
}

absl::Status ReadMessages(const Json& body, OpenAiRequest& r) {
  if (IsNull(body, "messages") || !body.at("messages").is_array() ||
      body.at("messages").empty()) {
    return QuotedFieldError("messages", "must be a non-empty list");
  }
  int i = 0;
  for (const Json& m : body.at("messages")) {
    const std::string field = absl::StrCat("messages.[", i++, "]");
    if (!m.is_object()) return QuotedFieldError(field, "must be an object");
    if (IsNull(m, "role") || !m.at("role").is_string()) {
      return QuotedFieldError(field + ".role", "is required (a string)");
    }
    const std::string role = m.at("role").get<std::string>();
    if (!KnownRole(role)) {
      return QuotedFieldError(
          field + ".role",
          absl::StrCat("'", role.substr(0, 64),
                       "' is not one of 'system', 'developer', 'user', "
                       "'assistant', 'tool'"));
    }
    auto content = MessageContent(m, field + ".content", role);
    if (!content.ok()) return content.status();
    ChatTurn& turn = r.messages.emplace_back();
    turn.role = role;
    turn.content = *std::move(content);
    if (auto s = ReadToolCalls(m, field, turn); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// response_format / grammar as a grammar spec (compiled later, against
// the model's vocabulary).
absl::Status ReadConstraint(const Json& body, OpenAiRequest& r) {
  auto spec = ConstraintFromOpenAi(body);
  if (!spec.ok()) {
    r.constraint_param = absl::StartsWith(spec.status().message(), "grammar")
                             ? "grammar"
                             : "response_format";
    return FieldError(r.constraint_param, spec.status().message());
  }
  r.constraint = *std::move(spec);
  r.constraint_param =
      r.constraint && r.constraint->kind == grammar::ConstraintSpec::kGbnf
          ? "grammar"
          : "response_format";
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
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
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
  if (s = ReadConstraint(j, r); !s.ok()) return s;
  if (endpoint == Endpoint::kChat) {
    if (s = ReadTools(j, r); !s.ok()) return s;
    if (ToolsActive(r) && r.logprobs >= 0) {
      return QuotedFieldError("logprobs",
                              "is not supported with tools (set "
                              "tool_choice \"none\" or leave out logprobs)");
    }
  }
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
  s.logprobs = r.logprobs;
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

int HttpStatusFor(const absl::Status& status) {
  if (auto limit = LimitOf(status);
      limit && LimitRetryDelay(limit->limit) <= absl::ZeroDuration()) {
    return 400;
  }
  return HttpStatusOf(status.code());
}

absl::Status FieldError(absl::string_view param, absl::string_view message,
                        absl::string_view code) {
  absl::Status s = absl::InvalidArgumentError(message);
  s.SetPayload(kParamPayload, absl::Cord(param));
  if (!code.empty()) s.SetPayload(kCodePayload, absl::Cord(code));
  return s;
}

std::optional<int> RetryAfterSeconds(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnavailable) return 1;
  if (status.code() != absl::StatusCode::kResourceExhausted) {
    return std::nullopt;
  }
  auto limit = LimitOf(status);
  if (!limit) return 1;
  const absl::Duration d = LimitRetryDelay(limit->limit);
  if (d <= absl::ZeroDuration()) return std::nullopt;
  return std::max<int>(
      1,
      static_cast<int>(absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)))));
}

std::string ErrorBody(const absl::Status& status, absl::string_view param,
                      absl::string_view code_name) {
  std::string field(param);
  if (field.empty()) {
    if (auto p = status.GetPayload(kParamPayload)) field = std::string(*p);
  }
  std::string code(code_name);
  if (code.empty()) {
    if (auto c = status.GetPayload(kCodePayload)) code = std::string(*c);
  }
  if (code.empty()) {
    code = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
    if (auto limit = LimitOf(status)) code = LimitName(limit->limit);
  }
  Json e{{"message", std::string(status.message())},
         {"type", ErrorType(HttpStatusFor(status))},
         {"param", field.empty() ? Json(nullptr) : Json(field)},
         {"code", code}};
  return Dump(Json{{"error", e}});
}

Json ModelJson(absl::string_view model_id, int64_t created) {
  return Json{{"id", std::string(model_id)},
              {"object", "model"},
              {"created", created},
              {"owned_by", "clusterkv"}};
}

std::string ModelsBody(absl::string_view model_id, int64_t created) {
  return Dump(Json{{"object", "list"},
                   {"data", Json::array({ModelJson(model_id, created)})}});
}

std::string ModelBody(absl::string_view model_id, int64_t created) {
  return Dump(ModelJson(model_id, created));
}

namespace {

std::string PiecesText(const std::vector<TokenPiece>& pieces) {
  std::string text;
  for (const TokenPiece& p : pieces) text += p.text;
  return text;
}

std::string TokenBytes(const ChoiceOptions& o, int32_t id,
                       const std::string& fallback) {
  return o.token_bytes ? o.token_bytes(id) : fallback;
}

Json BytesJson(absl::string_view bytes) {
  Json a = Json::array();
  for (char c : bytes) a.push_back(static_cast<int>(static_cast<uint8_t>(c)));
  return a;
}

// OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs}],
// "refusal": null}.
Json ChatLogprobs(const std::vector<TokenPiece>& pieces,
                  const ChoiceOptions& o) {
  Json content = Json::array();
  for (const TokenPiece& p : pieces) {
    if (!p.has_logprobs) continue;
    const std::string bytes = TokenBytes(o, p.token, p.text);
    Json top = Json::array();
    for (const TokenLogprob& t : p.logprobs.top) {
      const std::string tb = TokenBytes(o, t.id, absl::StrCat(t.id));
      top.push_back(Json{
          {"token", tb}, {"logprob", t.logprob}, {"bytes", BytesJson(tb)}});
    }
    content.push_back(Json{{"token", bytes},
                           {"logprob", p.logprobs.logprob},
                           {"bytes", BytesJson(bytes)},
                           {"top_logprobs", top}});
  }
  return Json{{"content", content}, {"refusal", nullptr}};
}

// The completions shape: {tokens, token_logprobs, top_logprobs,
// text_offset}; offsets count from `offset` (the text before these pieces).
Json CompletionLogprobs(const std::vector<TokenPiece>& pieces,
                        const ChoiceOptions& o, int64_t offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  for (const TokenPiece& p : pieces) {
    if (p.has_logprobs) {
      tokens.push_back(TokenBytes(o, p.token, p.text));
      lps.push_back(p.logprobs.logprob);
      Json top = Json::object();
      for (const TokenLogprob& t : p.logprobs.top) {
        top[TokenBytes(o, t.id, absl::StrCat(t.id))] = t.logprob;
      }
      tops.push_back(top);
      offsets.push_back(offset);
    }
    offset += static_cast<int64_t>(p.text.size());
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", lps},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

}  // namespace

ChoiceOptions ChoiceOptionsOf(const OpenAiRequest& r) {
  ChoiceOptions o;
  o.logprobs = r.logprobs;
  o.include_usage = r.include_usage;
  if (r.echo && r.endpoint == Endpoint::kCompletions) o.echo_text = r.prompt;
  return o;
}

std::string CompletionBody(const ResponseHead& head,
                           const std::vector<TokenPiece>& pieces,
                           absl::string_view finish_reason, const Usage& usage,
                           const ChoiceOptions& options) {
  const bool chat = head.endpoint == Endpoint::kChat;
  Json choice{{"index", options.index},
              {"finish_reason", std::string(finish_reason)}};
  const std::string text = PiecesText(pieces);
  if (chat) {
    choice["message"] = Json{{"role", "assistant"}, {"content", text}};
    choice["logprobs"] =
        options.logprobs >= 0 ? ChatLogprobs(pieces, options) : Json(nullptr);
  } else {
    choice["text"] = options.echo_text + text;
    choice["logprobs"] =
        options.logprobs >= 0
            ? CompletionLogprobs(pieces, options,
                                 static_cast<int64_t>(options.echo_text.size()))
            : Json(nullptr);
  }
  Json j = HeadJson(head, chat ? "chat.completion" : "text_completion");
  j["choices"] = Json::array({choice});
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string CompletionBody(const ResponseHead& head, absl::string_view text,
                           absl::string_view finish_reason,
                           const Usage& usage) {
  std::vector<TokenPiece> pieces(1);
  pieces[0].text = std::string(text);
  return CompletionBody(head, pieces, finish_reason, usage, ChoiceOptions());
}

std::string ChunkBody(const ResponseHead& head,
                      const std::vector<TokenPiece>& pieces, bool first,
                      const ChoiceOptions& options,
                      absl::string_view finish_reason) {
  const bool chat = head.endpoint == Endpoint::kChat;
  Json choice{{"index", options.index},
              {"finish_reason", finish_reason.empty()
                                    ? Json(nullptr)
                                    : Json(std::string(finish_reason))}};
  const std::string text = PiecesText(pieces);
  const bool with_logprobs = options.logprobs >= 0 && !pieces.empty();
  if (chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = delta;
    choice["logprobs"] =
        with_logprobs ? ChatLogprobs(pieces, options) : Json(nullptr);
  } else {
    const std::string echo = first ? options.echo_text : std::string();
    choice["text"] = echo + text;
    choice["logprobs"] =
        with_logprobs
            ? CompletionLogprobs(
                  pieces, options,
                  options.text_offset + static_cast<int64_t>(echo.size()))
            : Json(nullptr);
  }
  Json j = HeadJson(head, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array({choice});
  return Dump(j);
}

std::string ChunkBody(const ResponseHead& head, absl::string_view text,
                      bool first, absl::string_view finish_reason) {
  std::vector<TokenPiece> pieces;
  if (!text.empty()) pieces.emplace_back().text = std::string(text);
  return ChunkBody(head, pieces, first, ChoiceOptions(), finish_reason);
}

std::string MergeChoices(const std::vector<std::string>& bodies) {
  if (bodies.empty()) return std::string();
  Json j = Json::parse(bodies[0]);
  for (size_t i = 1; i < bodies.size(); ++i) {
    Json other = Json::parse(bodies[i]);
    for (Json& c : other["choices"]) j["choices"].push_back(std::move(c));
  }
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
