#include "server/http/openai_frontend.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/constraint_convert.h"
#include "server/http/openai_tools.h"
#include "server/request_log.h"
#include "server/service_convert.h"
#include "server/status_util.h"

namespace ckv::server::http {
namespace {

std::string ModelIdOf(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (absl::EndsWith(name, ".gguf")) name.resize(name.size() - 5);
  return name.empty() ? "clusterkv" : name;
}

std::optional<std::string> SpecialText(const Tokenizer& t, int32_t id) {
  if (id < 0) return std::nullopt;
  return std::string(t.TokenText(id));
}

// "new" -> "", "KEY.new" -> "KEY"; nullopt for any other value.
std::optional<std::string> NewSessionKey(absl::string_view header) {
  if (header == kNewSession) return std::string();
  const std::string suffix = absl::StrCat(".", kNewSession);
  if (absl::EndsWith(header, suffix) && header.size() > suffix.size()) {
    return std::string(header.substr(0, header.size() - suffix.size()));
  }
  return std::nullopt;
}

const char* RpcName(const OpenAiRequest& r) {
  return r.endpoint == Endpoint::kChat ? "http.ChatCompletions"
                                       : "http.Completions";
}

}  // namespace

struct OpenAiFrontend::Target {
  SessionLease lease;
  std::string created_id;  // a session this request made
  bool one_shot = false;
};

OpenAiFrontend::OpenAiFrontend(ServiceState& state)
    : state_(state), model_id_(ModelIdOf(state.config().model_path)) {
  const ServiceBackend b = state.backend_unchecked();
  if (b.model == nullptr) return;
  const int64_t file_context = b.model->config.context_length;
  context_length_ = state.config().context_length > 0
                        ? state.config().context_length
                        : file_context;
  if (file_context > 0 && context_length_ > file_context) {
    LogError(absl::StrCat(
        "http: --context-length ", context_length_,
        " is above the model's trained context ", file_context,
        " (its RoPE scaling does not cover it; quality may degrade)"));
  }
  const Tokenizer& tok = *b.model->tokenizer;
  render_options_.add_generation_prompt = true;
  render_options_.bos_token = SpecialText(tok, tok.bos_id());
  render_options_.eos_token = SpecialText(tok, tok.eos_id());
  auto source = b.model->file->GetString("tokenizer.chat_template");
  if (!source.ok()) {
    LogInfo(
        "http: the model has no tokenizer.chat_template; chat messages "
        "are rendered as 'role: content' lines");
    return;
  }
  auto parsed = chat::ChatTemplate::Parse(*source);
  if (!parsed.ok()) {
    LogError(absl::StrCat("http: tokenizer.chat_template does not parse (",
                          parsed.status().message(),
                          "); chat messages are rendered as 'role: content' "
                          "lines"));
    return;
  }
  chat_template_ = *std::move(parsed);
  tool_syntax_ = chat::ToolCallSyntaxOf(*source);
}

absl::StatusOr<std::string> OpenAiFrontend::RenderChat(
    const OpenAiRequest& request) const {
  if (ToolsActive(request) && tool_syntax_ == chat::ToolCallSyntax::kNone) {
    return FieldError(
        "tools",
        "'tools' needs a model whose chat template renders tools and "
        "teaches a tool-call syntax this server reads (Hermes <tool_call>, "
        "Llama 3 JSON, Mistral [TOOL_CALLS]); this model's does not (use "
        "tool_choice \"none\" or leave out tools)");
  }
  if (!chat_template_.has_value()) {
    return RenderRawConversation(request.messages);
  }
  auto messages = chat::ValueFromJson(TemplateMessagesJson(request.messages));
  if (!messages.ok()) return messages.status();
  chat::ChatRenderOptions options = render_options_;
  const std::string tools = TemplateToolsJson(request);
  if (!tools.empty()) {
    auto value = chat::ValueFromJson(tools);
    if (!value.ok()) return value.status();
    options.tools = *std::move(value);
  }
  auto text = chat_template_->Render(*messages, options);
  if (!text.ok()) {
    // A template's raise_exception (e.g. roles out of order) is the
    // caller's error.
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", text.status().message()));
  }
  return text;
}

absl::Status OpenAiFrontend::ApplyConstraints(const ServiceBackend& b,
                                              const OpenAiRequest& request,
                                              SamplingParams* sampling) const {
  std::optional<grammar::ConstraintSpec> spec = request.constraint;
  std::string param = request.constraint_param;
  if (ToolsActive(request)) {
    auto forced = ForcedToolGrammar(tool_syntax_, request);
    if (!forced.ok()) return forced.status();
    if (forced->has_value()) {
      if (spec.has_value()) {
        return FieldError(param,
                          absl::StrCat("'", param,
                                       "' cannot constrain the output when "
                                       "tool_choice forces a tool call"));
      }
      spec = *std::move(*forced);
      param = "tools";
    }
  }
  if (!spec.has_value()) return absl::OkStatus();
  // Bounded by grammar::GrammarLimits (docs/structured-outputs.md); runs on
  // the blocking pool, never on the event loop.
  if (auto s = ApplyConstraint(*spec, *b.model->tokenizer, sampling); !s.ok()) {
    return FieldError(param, absl::StartsWith(s.message(), param)
                                 ? std::string(s.message())
                                 : absl::StrCat(param, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> OpenAiFrontend::PromptTokens(
    const ServiceBackend& b, const OpenAiRequest& request,
    bool session_empty) const {
  const Tokenizer& tok = *b.model->tokenizer;
  if (request.endpoint == Endpoint::kCompletions) {
    if (request.has_prompt_ids) {
      return CheckTokenIds(request.prompt_ids, b.model->config.vocab_size);
    }
    return EncodeText(tok, request.prompt, /*add_bos=*/session_empty);
  }
  auto text = RenderChat(request);
  if (!text.ok()) return text.status();
  if (!chat_template_.has_value()) {
    return EncodeText(tok, *text, /*add_bos=*/session_empty);
  }
  // The template writes its own BOS text (parsed as the special token).
  return tok.Encode(*text, /*add_special=*/false, /*parse_special=*/true);
}

ChoiceOptions OpenAiFrontend::Options(const OpenAiRequest& request) const {
  ChoiceOptions o = ChoiceOptionsOf(request);
  const ServiceBackend b = state_.backend_unchecked();
  if (o.logprobs >= 0 && b.model != nullptr) {
    const Tokenizer* tok = b.model->tokenizer.get();
    o.token_bytes = [tok](int32_t id) { return tok->TokenToPiece(id); };
  }
  return o;
}

absl::StatusOr<SamplingParams> OpenAiFrontend::Sampling(
    const ServiceBackend& b, const OpenAiRequest& request,
    const SessionLease& lease, int64_t input_tokens) const {
  SamplingParams sampling = ApplySampling(lease->sampling(), request);
  if (!request.seed.has_value()) {
    // OpenAI: without a seed every request samples afresh.
    thread_local std::mt19937_64 rng(std::random_device{}());
    sampling.seed = rng();
  }
  const char* prompt_field =
      request.endpoint == Endpoint::kChat ? "messages" : "prompt";
  const int64_t max_prompt = state_.config().limits.max_prompt_tokens;
  if (input_tokens > max_prompt) {
    return FieldError(
        prompt_field,
        absl::StrCat("'", prompt_field, "' is ", input_tokens,
                     " tokens; this server takes at most ", max_prompt,
                     " per request (max_prompt_tokens)"),
        "max_prompt_tokens");
  }
  const int64_t used = lease->stats().tokens + input_tokens;
  const int64_t context = context_length_ > 0
                              ? context_length_
                              : std::numeric_limits<int64_t>::max();
  const int64_t session_max = lease->kv().max_tokens > 0
                                  ? lease->kv().max_tokens
                                  : state_.config().limits.max_session_tokens;
  const int64_t room = std::min(context, session_max) - used;
  const bool context_bound = context <= session_max;
  auto too_long = [&](int64_t completion) {
    if (context_bound) {
      return FieldError(
          prompt_field,
          absl::StrCat("This model's maximum context length is ", context,
                       " tokens. However, you requested ", used + completion,
                       " tokens (", used, " in the ", prompt_field,
                       lease->stats().tokens > 0 ? " and the session" : "",
                       ", ", completion,
                       " in the completion). Please reduce the length of the ",
                       prompt_field, " or completion."),
          "context_length_exceeded");
    }
    return FieldError(
        "max_tokens",
        absl::StrCat("'max_tokens' is ", completion, " but the session holds ",
                     lease->stats().tokens, " tokens and the request adds ",
                     input_tokens, "; a session holds at most ", session_max,
                     " (max_session_tokens)"),
        "max_session_tokens");
  };
  if (room < 1) return too_long(request.max_tokens.value_or(1));
  if (request.max_tokens.has_value()) {
    if (*request.max_tokens > room) return too_long(*request.max_tokens);
  } else {
    sampling.max_tokens =
        static_cast<int>(std::min<int64_t>(sampling.max_tokens, room));
  }
  if (auto s = ApplyConstraints(b, request, &sampling); !s.ok()) return s;
  if (auto s = ValidateSampling(sampling, b.model->config.vocab_size);
      !s.ok()) {
    // Internal names (sampling.max_tokens) in OpenAI's (max_tokens).
    std::string message(s.message());
    std::string field;
    const size_t at = message.find("sampling.");
    if (at != std::string::npos) {
      size_t end = at + 9;
      while (end < message.size() &&
             (absl::ascii_isalnum(message[end]) || message[end] == '_')) {
        ++end;
      }
      field = message.substr(at + 9, end - at - 9);
      if (field == "logprobs" && request.endpoint == Endpoint::kChat) {
        field = "top_logprobs";
      }
      message.replace(at, end - at, absl::StrCat("'", field, "'"));
    }
    return FieldError(field, message);
  }
  return sampling;
}

absl::StatusOr<OpenAiFrontend::Target> OpenAiFrontend::ResolveSession(
    const ServiceBackend& b, const std::string& tenant,
    const SessionChoice& choice) const {
  Target t;
  std::string id = choice.session_id;
  const std::optional<std::string> new_key = NewSessionKey(id);
  if (id.empty() || new_key.has_value()) {
    if (choice.fork) {
      return absl::InvalidArgumentError(
          "x-session-fork needs x-session-id naming an existing session");
    }
    SessionOptions o;
    auto kv = MergeKvConfig(state_.config().kv, v1::KvConfig(),
                            b.model->config.n_layers);
    if (!kv.ok()) return kv.status();
    o.kv = *kv;
    o.sampling = state_.config().sampling;
    o.tenant = tenant;
    if (new_key.has_value() && !new_key->empty()) {
      if (auto s = ValidateRoutingKey(*new_key); !s.ok()) return s;
      o.routing_key = *new_key;
    }
    auto session = b.sessions->Create(o);
    if (!session.ok()) {
      CountLimitRejection(state_.metrics(), session.status());
      return session.status();
    }
    id = t.created_id = (*session)->id();
    t.one_shot = !new_key.has_value();
  } else {
    if (auto s = ValidateSessionId(id); !s.ok()) return s;
    if (choice.fork) {
      auto child = b.sessions->Fork(id, tenant);
      if (!child.ok()) return child.status();
      id = t.created_id = (*child)->id();
    }
  }
  auto lease = b.sessions->Acquire(id, tenant);
  if (!lease.ok()) {
    if (!t.created_id.empty()) (void)b.sessions->Close(t.created_id, tenant);
    return lease.status();
  }
  t.lease = *std::move(lease);
  return t;
}

absl::StatusOr<StartedJob> OpenAiFrontend::Start(
    const std::string& tenant, const SessionChoice& choice,
    const OpenAiRequest& request) const {
  auto backend = state_.Backend();
  if (!backend.ok()) return backend.status();
  const ServiceBackend& b = *backend;
  if (!request.model.empty() && request.model != model_id_) {
    return absl::NotFoundError(absl::StrCat(
        "model '", request.model, "' is not served here (GET /v1/models)"));
  }
  if (auto s = CheckChoices(choice, request); !s.ok()) return s;
  auto target = ResolveSession(b, tenant, choice);
  if (!target.ok()) return target.status();
  const bool empty = target->lease->stats().tokens == 0;
  const std::string created = target->created_id;
  auto close_created = [&](absl::Status s) {
    target->lease = SessionLease();
    if (!created.empty()) (void)b.sessions->Close(created, tenant);
    return s;
  };
  auto input = PromptTokens(b, request, empty);
  if (!input.ok()) return close_created(input.status());
  if (input->empty() && empty) {
    return close_created(absl::InvalidArgumentError(
        "empty prompt: the session holds no tokens to continue from"));
  }
  auto sampling =
      Sampling(b, request, target->lease, static_cast<int64_t>(input->size()));
  if (!sampling.ok()) return close_created(sampling.status());
  JobSpec spec;
  spec.lease = std::move(target->lease);
  spec.input = *std::move(input);
  spec.kind = empty ? AppendKind::kPrompt : AppendKind::kGenerated;
  spec.generate = true;
  spec.sampling = *sampling;
  StartedJob started;
  if (target->one_shot) {
    // Whole blocks of the prompt another one-shot request of this tenant
    // prefilled are reused; spec.input keeps the rest.
    started.cached_tokens = b.sessions->UsePrefixCache(spec, state_.metrics());
  } else {
    started.session_id = spec.lease->id();
  }
  if (ToolsActive(request)) started.tool_syntax = tool_syntax_;
  AdmissionRequest a;
  a.input_tokens = static_cast<int64_t>(spec.input.size());
  a.max_new_tokens = sampling->max_tokens;
  a.session_tokens = spec.lease->stats().tokens;
  a.kv = spec.lease->kv();
  a.tenant = spec.lease->tenant();
  started.prompt_tokens = a.input_tokens + started.cached_tokens;
  if (request.n > 1) {
    return StartGroup(b, request, std::move(spec), a, std::move(started));
  }
  const char* rpc = RpcName(request);
  started.job = std::make_shared<GenerationJob>(state_, b, rpc, tenant);
  if (!created.empty())
    started.job->SetCreatedSession(created, target->one_shot);
  if (auto s = started.job->Submit(std::move(spec), a); !s.ok()) return s;
  return started;
}

absl::Status OpenAiFrontend::CheckChoices(const SessionChoice& choice,
                                          const OpenAiRequest& request) const {
  if (request.n == 1) return absl::OkStatus();
  const int max = state_.config().http.max_choices;
  if (request.n > max) {
    return FieldError("n", absl::StrCat("'n' is ", request.n,
                                        "; this server samples at most ", max,
                                        " choices per request"));
  }
  if (!choice.session_id.empty()) {
    return FieldError(
        "n",
        "'n' > 1 needs a one-shot request (no x-session-id): its choices "
        "fork the prompt; to sample a session several times, send one "
        "request per choice with x-session-fork: 1");
  }
  const ServerLimits& limits = state_.config().limits;
  const int sessions =
      limits.tenant_max_sessions > 0
          ? std::min(limits.max_sessions, limits.tenant_max_sessions)
          : limits.max_sessions;
  if (request.n > sessions) {
    return FieldError("n", absl::StrCat("'n' is ", request.n,
                                        ": each choice is a session and this "
                                        "server holds at most ",
                                        sessions, " (max_sessions)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<AdmissionTicket>>>
OpenAiFrontend::AdmitChoices(const ServiceBackend& b, int n,
                             const AdmissionRequest& prompt,
                             int64_t max_tokens) const {
  const ServerLimits& limits = state_.config().limits;
  const int64_t host =
      (prompt.input_tokens + n * max_tokens) * b.sessions->HostBytesPerToken();
  const int64_t device =
      b.admission->DeviceBytesEstimate(prompt.kv, prompt.input_tokens) +
      n * b.admission->DeviceBytesEstimate(prompt.kv, max_tokens);
  if (host > limits.max_host_kv_bytes || device > limits.max_device_kv_bytes) {
    return FieldError(
        "n", absl::StrCat("'n' is ", n, ": ", n, " choices of ", max_tokens,
                          " tokens need more KV memory than this server has "
                          "(max_host_kv_bytes, max_device_kv_bytes); lower "
                          "'n' or 'max_tokens'"));
  }
  AdmissionRequest c = prompt;
  c.session_tokens += prompt.input_tokens;
  c.input_tokens = 0;
  c.max_new_tokens = max_tokens;
  std::vector<std::unique_ptr<AdmissionTicket>> tickets;
  for (int i = 0; i < n; ++i) {
    auto t = b.admission->Admit(c);
    if (!t.ok()) return t.status();
    tickets.push_back(*std::move(t));
  }
  return tickets;
}

absl::StatusOr<StartedJob> OpenAiFrontend::StartGroup(
    const ServiceBackend& b, const OpenAiRequest& request, JobSpec spec,
    const AdmissionRequest& prompt, StartedJob started) const {
  const std::string parent = spec.lease->id();
  const std::string tenant = spec.lease->tenant();
  auto tickets = AdmitChoices(b, request.n, prompt, spec.sampling.max_tokens);
  if (!tickets.ok()) {
    spec.lease = SessionLease();
    (void)b.sessions->Close(parent, tenant);
    return tickets.status();
  }
  ChoicePlan plan;
  plan.sampling = spec.sampling;
  plan.seeded = request.seed.has_value();
  plan.rpc = RpcName(request);
  plan.tenant = tenant;
  plan.parent_id = parent;
  plan.tickets = *std::move(tickets);
  // The prompt alone: it ends with the logits every fork samples from.
  spec.generate = false;
  AdmissionRequest a = prompt;
  a.max_new_tokens = 0;
  RequestRecord record;
  record.rpc = plan.rpc;
  record.session_id = parent;
  record.tenant = tenant;
  plan.log = std::make_shared<RequestLogGroup>(state_.metrics(), record);
  auto prefill = std::make_shared<GenerationJob>(state_, b, plan.rpc, tenant);
  prefill->SetCreatedSession(parent, /*close_at_end=*/false);
  prefill->SetLogSink(plan.log->AddPart());
  if (auto s = prefill->Submit(std::move(spec), a); !s.ok()) return s;
  started.group = std::make_shared<ChoiceGroup>(state_, b, std::move(plan),
                                                std::move(prefill));
  return started;
}

absl::StatusOr<std::string> OpenAiFrontend::Tokenize(
    absl::string_view body) const {
  using Json = nlohmann::json;
  auto backend = state_.Backend();
  if (!backend.ok()) return backend.status();
  if (body.size() > kMaxTokenizeBytes) {
    return FieldError("content", absl::StrCat("'content' is more than ",
                                              kMaxTokenizeBytes, " bytes"));
  }
  Json j = Json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  if (!j.contains("content") || !j["content"].is_string()) {
    return FieldError("content", "'content' must be a string");
  }
  auto flag = [&](const char* key, bool* out) -> absl::Status {
    if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
    if (!j[key].is_boolean()) {
      return FieldError(key, absl::StrCat("'", key, "' must be a boolean"));
    }
    *out = j[key].get<bool>();
    return absl::OkStatus();
  };
  bool add_special = false, with_pieces = false;
  if (auto s = flag("add_special", &add_special); !s.ok()) return s;
  if (auto s = flag("with_pieces", &with_pieces); !s.ok()) return s;
  const Tokenizer& tok = *backend->model->tokenizer;
  auto ids = tok.Encode(j["content"].get<std::string>(), add_special,
                        /*parse_special=*/true);
  if (!ids.ok()) return FieldError("content", ids.status().message());
  Json tokens = Json::array();
  for (int32_t id : *ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.TokenToPiece(id);
    Json p = Json::object();
    p["id"] = id;
    // llama.cpp: a piece that is not valid UTF-8 is its byte list.
    Json probe = piece;
    std::string dumped;
    try {
      dumped = probe.dump();
      p["piece"] = piece;
    } catch (const Json::type_error&) {
      Json bytes = Json::array();
      for (char c : piece) bytes.push_back(static_cast<uint8_t>(c));
      p["piece"] = bytes;
    }
    tokens.push_back(p);
  }
  return Json{{"tokens", tokens}}.dump();
}

absl::StatusOr<std::string> OpenAiFrontend::Detokenize(
    absl::string_view body) const {
  using Json = nlohmann::json;
  auto backend = state_.Backend();
  if (!backend.ok()) return backend.status();
  Json j = Json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("request body must be a JSON object");
  }
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    return FieldError("tokens", "'tokens' must be a list of token ids");
  }
  std::vector<int32_t> ids;
  for (const Json& id : j["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= backend->model->config.vocab_size) {
      return FieldError("tokens",
                        absl::StrCat("'tokens' must hold ids in [0, ",
                                     backend->model->config.vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  StreamingDetokenizer detok(*backend->model->tokenizer,
                             /*render_special=*/true);
  std::string text;
  for (int32_t id : ids) text += detok.Push(id);
  text += detok.Flush();
  return Json{{"content", text}}.dump(-1, ' ', false,
                                      Json::error_handler_t::replace);
}

}  // namespace ckv::server::http
