// Decode and Generate: a write reactor that tokenizes and validates the
// input, admits the request, submits one generating job and streams its
// tokens, then a DecodeSummary.
#include <chrono>
#include <string>
#include <vector>

#include "server/chat_input.h"
#include "server/service_auth.h"
#include "server/service_convert.h"
#include "server/service_reactors.h"
#include "server/stream_reactor.h"

namespace ckv::server {
namespace {

using DecodeBase = StreamReactor<grpc::ServerWriteReactor<v1::DecodeResponse>,
                                 v1::DecodeResponse>;
using Clock = std::chrono::steady_clock;

class DecodeReactor final : public DecodeBase {
 public:
  DecodeReactor(ServiceState& state, grpc::CallbackServerContext* ctx,
                const char* rpc)
      : DecodeBase(state, ctx, rpc) {}

  // Starts the call on the blocking pool (leasing may restore a session
  // from disk; the input is tokenized or rendered there); on error the
  // stream is finished with the error. `req` lives until the call finishes.
  void StartDecode(const v1::DecodeRequest& req) {
    RunBlocking([this, &req] {
      const grpc::Status s = TryDecode(req);
      if (!s.ok()) EndStream(s);
    });
  }
  void StartGenerate(const v1::GenerateRequest& req) {
    RunBlocking([this, &req] {
      const grpc::Status s = TryGenerate(req);
      if (!s.ok()) {
        CloseEphemeral();
        EndStream(s);
      }
    });
  }

 private:
  grpc::Status TryDecode(const v1::DecodeRequest& req);
  grpc::Status TryGenerate(const v1::GenerateRequest& req);
  // Decode's input: sets update_.input and, for messages, the pending
  // conversation (the session is leased).
  absl::StatusOr<std::vector<int32_t>> LeasedInput(const v1::DecodeRequest& req,
                                                   const SessionLease& lease);
  grpc::Status Submit(SessionLease lease, std::vector<int32_t> input,
                      AppendKind kind, const SamplingParams& sampling,
                      bool keep_partial_on_cancel = false);
  void OnToken(int32_t id, absl::string_view text,
               const TokenLogprobs* logprobs);
  void OnJobDone(const JobResult& r) override;
  void CloseEphemeral();

  ServiceBackend backend_;
  std::string ephemeral_id_;   // Generate's session, closed at the end
  int64_t cached_tokens_ = 0;  // Generate: prompt tokens from the cache
  ConversationUpdate update_;  // Decode: the session's conversation
  Clock::time_point last_token_;
  bool any_token_ = false;  // engine thread only
};

// Decode's optional input (no BOS: it continues the session).
absl::StatusOr<std::vector<int32_t>> DecodeInput(const Model& model,
                                                 const v1::DecodeRequest& req) {
  if (req.has_tokens()) {
    return CheckTokenIds(req.tokens().ids(), model.config.vocab_size);
  }
  return EncodeText(*model.tokenizer, req.text(), /*add_bos=*/false);
}

// Messages rendered onto `conv` (of a session holding `session_tokens`),
// tokenized as the template wrote them (no BOS added).
absl::StatusOr<std::vector<int32_t>> ChatInput(const ServiceBackend& b,
                                               const ServerLimits& limits,
                                               const v1::ChatMessages& wire,
                                               const Conversation& conv,
                                               int64_t session_tokens,
                                               Conversation* after) {
  auto messages = ReadChatMessages(wire, limits);
  if (!messages.ok()) return messages.status();
  if (b.chat == nullptr) {
    return absl::FailedPreconditionError(
        "model has no chat template; send text");
  }
  const bool prompt =
      !wire.has_add_generation_prompt() || wire.add_generation_prompt();
  auto turn =
      b.chat->Prepare(conv, session_tokens, *std::move(messages), prompt);
  if (!turn.ok()) return turn.status();
  *after = std::move(turn->after);
  return EncodeText(*b.model->tokenizer, turn->text, /*add_bos=*/false);
}

absl::StatusOr<std::vector<int32_t>> GenerateInput(
    const ServiceBackend& b, const ServerLimits& limits,
    const v1::GenerateRequest& req) {
  const Model& model = *b.model;
  if (req.has_tokens()) {
    return CheckTokenIds(req.tokens().ids(), model.config.vocab_size);
  }
  if (req.has_messages()) {
    Conversation unused;
    return ChatInput(b, limits, req.messages(), Conversation(), 0, &unused);
  }
  if (req.prompt().empty()) return std::vector<int32_t>();
  const bool add_bos = !req.has_add_bos() || req.add_bos();
  return EncodeText(*model.tokenizer, req.prompt(), add_bos);
}

grpc::Status DecodeReactor::TryDecode(const v1::DecodeRequest& req) {
  rec_.session_id = req.session_id();
  auto tenant = CallerTenant(state_, *ctx_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  rec_.tenant = *std::move(tenant);
  auto backend = state_.Backend();
  if (!backend.ok()) return ToGrpcStatus(backend.status());
  backend_ = *backend;
  if (req.session_id().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("session_id is required"));
  }
  if (auto s = ValidateSessionId(req.session_id()); !s.ok()) {
    return ToGrpcStatus(s);  // before tokenizing the input
  }
  auto lease = backend_.sessions->Acquire(req.session_id(), rec_.tenant);
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  auto input = LeasedInput(req, *lease);
  if (!input.ok()) {
    CountLimitRejection(state_.metrics(), input.status());
    return ToGrpcStatus(input.status());
  }
  auto sampling = MergeSampling((*lease)->sampling(), req.sampling(),
                                backend_.model->config.vocab_size,
                                backend_.model->tokenizer.get());
  if (!sampling.ok()) return ToGrpcStatus(sampling.status());
  if (input->empty() && (*lease)->stats().tokens == 0) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "empty input: the session holds no tokens to continue from"));
  }
  return Submit(*std::move(lease), *std::move(input), AppendKind::kGenerated,
                *sampling, req.keep_partial_on_cancel());
}

grpc::Status DecodeReactor::TryGenerate(const v1::GenerateRequest& req) {
  auto tenant = CallerTenant(state_, *ctx_);
  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
  rec_.tenant = *std::move(tenant);
  auto backend = state_.Backend();
  if (!backend.ok()) return ToGrpcStatus(backend.status());
  backend_ = *backend;
  const ServerConfig& config = state_.config();
  auto input = GenerateInput(backend_, config.limits, req);
  if (!input.ok()) return ToGrpcStatus(input.status());
  if (input->empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("empty prompt"));
  }
  SessionOptions o;
  auto kv = MergeKvConfig(config.kv, req.kv(), backend_.model->config.n_layers);
  if (!kv.ok()) return ToGrpcStatus(kv.status());
  auto sampling = MergeSampling(config.sampling, req.sampling(),
                                backend_.model->config.vocab_size,
                                backend_.model->tokenizer.get());
  if (!sampling.ok()) return ToGrpcStatus(sampling.status());
  o.kv = *kv;
  o.sampling = *sampling;
  o.tenant = rec_.tenant;
  auto session = backend_.sessions->Create(o);
  if (!session.ok()) {
    CountLimitRejection(state_.metrics(), session.status());
    return ToGrpcStatus(session.status());
  }
  ephemeral_id_ = (*session)->id();
  rec_.session_id = ephemeral_id_;
  auto lease = backend_.sessions->Acquire(ephemeral_id_, rec_.tenant);
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  return Submit(*std::move(lease), *std::move(input), AppendKind::kPrompt,
                *sampling);
}

absl::StatusOr<std::vector<int32_t>> DecodeReactor::LeasedInput(
    const v1::DecodeRequest& req, const SessionLease& lease) {
  update_.tokens_before = lease->stats().tokens;
  update_.generate = true;
  absl::StatusOr<std::vector<int32_t>> input;
  if (req.has_messages()) {
    update_.input = ConversationUpdate::Input::kMessages;
    input = ChatInput(backend_, state_.config().limits, req.messages(),
                      lease->conversation(), update_.tokens_before,
                      &update_.pending);
  } else {
    input = DecodeInput(*backend_.model, req);
    if (input.ok() && !input->empty()) {
      update_.input = ConversationUpdate::Input::kRaw;
    }
  }
  if (input.ok()) update_.input_tokens = static_cast<int64_t>(input->size());
  return input;
}

grpc::Status DecodeReactor::Submit(SessionLease lease,
                                   std::vector<int32_t> input, AppendKind kind,
                                   const SamplingParams& sampling,
                                   bool keep_partial_on_cancel) {
  JobSpec spec;
  spec.lease = std::move(lease);
  spec.input = std::move(input);
  spec.kind = kind;
  spec.generate = true;
  spec.sampling = sampling;
  spec.keep_partial_on_cancel = keep_partial_on_cancel;
  if (!ephemeral_id_.empty()) {  // Generate: a session-less request
    cached_tokens_ = backend_.sessions->UsePrefixCache(spec, state_.metrics());
  }
  AdmissionRequest a;
  a.input_tokens = static_cast<int64_t>(spec.input.size());
  a.max_new_tokens = sampling.max_tokens;
  a.session_tokens = spec.lease->stats().tokens;
  a.kv = spec.lease->kv();
  a.tenant = spec.lease->tenant();
  rec_.input_tokens = a.input_tokens;
  spec.callbacks.on_token = [this](int32_t id, absl::string_view text,
                                   const TokenLogprobs* logprobs) {
    OnToken(id, text, logprobs);
  };
  if (ephemeral_id_.empty()) {  // Decode: record the conversation
    const Tokenizer* tokenizer = backend_.model->tokenizer.get();
    spec.callbacks.before_release = [this, tokenizer](const JobResult& r,
                                                      Session& session) {
      ApplyConversationUpdate(update_, r, *tokenizer, session);
    };
  }
  return SubmitJob(backend_, std::move(spec), a);
}

// Engine thread. id -1 carries trailing text the detokenizer or the stop
// matcher held back until the end (it is not a token).
void DecodeReactor::OnToken(int32_t id, absl::string_view text,
                            const TokenLogprobs* logprobs) {
  const Clock::time_point now = Clock::now();
  if (id >= 0) update_.generated.push_back(id);
  if (id >= 0) {
    if (any_token_ && state_.metrics() != nullptr) {
      state_.metrics()->ObserveInterTokenLatency(
          std::chrono::duration<double>(now - last_token_).count());
    }
    any_token_ = true;
    last_token_ = now;
  }
  v1::DecodeResponse r;
  r.mutable_token()->set_id(id);
  r.mutable_token()->set_text(std::string(text));
  if (logprobs != nullptr) {
    FillLogprobs(*backend_.model->tokenizer, *logprobs, r.mutable_token());
  }
  Enqueue(std::move(r));
}

void DecodeReactor::OnJobDone(const JobResult& r) {
  rec_.input_tokens = r.input_tokens;
  rec_.generated_tokens = r.generated_tokens;
  if (r.generated_tokens > 0) rec_.ttft_seconds = r.time_to_first_token_seconds;
  if (!ephemeral_id_.empty() && state_.metrics() != nullptr && r.status.ok()) {
    state_.metrics()->ObservePrefill(r.input_seconds);
  }
  CloseEphemeral();
  if (!r.status.ok()) {
    EndStream(ToGrpcStatus(r.status));
    return;
  }
  v1::DecodeResponse resp;
  v1::DecodeSummary* s = resp.mutable_summary();
  s->set_finish_reason(ToProto(r.finish));
  s->set_input_tokens(r.input_tokens + cached_tokens_);
  s->set_cached_tokens(cached_tokens_);
  s->set_generated_tokens(r.generated_tokens);
  s->set_session_tokens(r.session_tokens);
  s->set_time_to_first_token_seconds(r.time_to_first_token_seconds);
  s->set_tokens_per_second(
      r.decode_seconds > 0 ? (r.generated_tokens - 1) / r.decode_seconds : 0.0);
  s->set_total_seconds(
      std::chrono::duration<double>(Clock::now() - rec_.start).count());
  s->set_text(r.text);
  Enqueue(std::move(resp));
  EndStream(grpc::Status::OK);
}

// The lease is released before on_done, so the session can be closed here.
void DecodeReactor::CloseEphemeral() {
  if (ephemeral_id_.empty() || backend_.sessions == nullptr) return;
  (void)backend_.sessions->Close(ephemeral_id_, rec_.tenant);
}

}  // namespace

grpc::ServerWriteReactor<v1::DecodeResponse>* NewDecodeReactor(
    ServiceState& state, grpc::CallbackServerContext* ctx,
    const v1::DecodeRequest& request) {
  auto* r = new DecodeReactor(state, ctx, "Decode");
  r->StartDecode(request);
  return r;
}

grpc::ServerWriteReactor<v1::DecodeResponse>* NewGenerateReactor(
    ServiceState& state, grpc::CallbackServerContext* ctx,
    const v1::GenerateRequest& request) {
  auto* r = new DecodeReactor(state, ctx, "Generate");
  r->StartGenerate(request);
  return r;
}

}  // namespace ckv::server
