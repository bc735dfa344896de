#include "server/http/openai_frontend.h"

#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
}

absl::StatusOr<std::string> OpenAiFrontend::RenderChat(
    const OpenAiRequest& request) const {
  if (!chat_template_.has_value()) {
    return RenderRawConversation(request.messages);
  }
  std::vector<chat::ChatMessage> messages;
  messages.reserve(request.messages.size());
  for (const ChatTurn& m : request.messages) {
    messages.push_back({m.role, m.content});
  }
  auto text = chat_template_->Render(messages, render_options_);
  if (!text.ok()) {
    // A template's raise_exception (e.g. roles out of order) is the
    // caller's error.
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", text.status().message()));
  }
  return text;
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
  SamplingParams sampling = ApplySampling(target->lease->sampling(), request);
  if (auto s = ValidateSampling(sampling, b.model->config.vocab_size);
      !s.ok()) {
    return close_created(s);
  }
  AdmissionRequest a;
  a.input_tokens = static_cast<int64_t>(input->size());
  a.max_new_tokens = sampling.max_tokens;
  a.session_tokens = target->lease->stats().tokens;
  a.kv = target->lease->kv();
  a.tenant = target->lease->tenant();
  StartedJob started;
  if (!target->one_shot) started.session_id = target->lease->id();
  const char* rpc = request.endpoint == Endpoint::kChat ? "http.ChatCompletions"
                                                        : "http.Completions";
  started.job = std::make_shared<GenerationJob>(state_, b, rpc, tenant);
  if (!created.empty())
    started.job->SetCreatedSession(created, target->one_shot);
  JobSpec spec;
  spec.lease = std::move(target->lease);
  spec.input = *std::move(input);
  spec.kind = empty ? AppendKind::kPrompt : AppendKind::kGenerated;
  spec.generate = true;
  spec.sampling = sampling;
  if (auto s = started.job->Submit(std::move(spec), a); !s.ok()) return s;
  return started;
}

}  // namespace ckv::server::http
