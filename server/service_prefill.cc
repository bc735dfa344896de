// Prefill: a bidirectional reactor that reads every request message until
// the client half-closes (the first names the session, which is leased at
// once), tokenizes the concatenated text once (on the blocking pool, not a
// gRPC callback thread), admits the request and submits one prompt job,
// streaming coalesced progress events and a summary.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/chat_input.h"
#include "server/service_auth.h"
#include "server/service_convert.h"
#include "server/service_reactors.h"
#include "server/stream_reactor.h"

namespace ckv::server {
namespace {

using PrefillBase = StreamReactor<
    grpc::ServerBidiReactor<v1::PrefillRequest, v1::PrefillResponse>,
    v1::PrefillResponse>;

// Text beyond this many bytes per allowed token cannot be a prompt within
// max_prompt_tokens for any real vocabulary; refusing it early bounds memory.
constexpr int64_t kMaxBytesPerToken = 64;

class PrefillReactor final : public PrefillBase {
 public:
  PrefillReactor(ServiceState& state, grpc::CallbackServerContext* ctx)
      : PrefillBase(state, ctx, "Prefill") {}

  void Start() {
    auto tenant = CallerTenant(state_, *ctx_);
    if (!tenant.ok()) {
      EndStream(ToGrpcStatus(tenant.status()));
      return;
    }
    rec_.tenant = *std::move(tenant);
    auto backend = state_.Backend();
    if (!backend.ok()) {
      EndStream(ToGrpcStatus(backend.status()));
      return;
    }
    backend_ = *backend;
    StartRead(&req_);
  }

  // The first message (it leases the session, which may be restored from
  // disk) and the half-close (tokenizing, rendering, admission) are handled
  // on the blocking pool; later messages only append their input.
  void OnReadDone(bool ok) override {
    if (!ok && ctx_->IsCancelled()) {
      Fail(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    } else if (!ok) {  // the client half-closed
      RunBlocking([this] {
        if (grpc::Status s = StartJob(); !s.ok()) Fail(s);
      });
    } else if (first_) {
      RunBlocking([this] { ReadNextOrFail(Accept(req_)); });
    } else {
      ReadNextOrFail(Accept(req_));
    }
  }

 private:
  enum class Input { kNone, kText, kTokens, kMessages };

  void ReadNextOrFail(const grpc::Status& s) {
    if (s.ok()) {
      StartRead(&req_);
    } else {
      Fail(s);
    }
  }
  void Fail(const grpc::Status& s) {
    lease_ = SessionLease();
    EndStream(s);
  }
  grpc::Status Accept(const v1::PrefillRequest& m);
  grpc::Status AcceptFirst(const v1::PrefillRequest& m);
  grpc::Status TooLong(int64_t need);
  absl::StatusOr<std::vector<int32_t>> Tokens();
  absl::StatusOr<std::vector<int32_t>> MessageTokens();
  grpc::Status StartJob();
  void OnJobDone(const JobResult& r) override;

  ServiceBackend backend_;
  // kMessages: validated, from the first message.
  std::vector<chat::ChatMessage> messages_;
  bool add_generation_prompt_ = true;
  ConversationUpdate update_;  // the session's conversation
  v1::PrefillRequest req_;
  bool first_ = true;
  bool add_bos_ = true;
  Input input_ = Input::kNone;
  std::string text_;
  std::vector<int32_t> ids_;
  SessionLease lease_;  // from the first message until submission
};

grpc::Status PrefillReactor::AcceptFirst(const v1::PrefillRequest& m) {
  first_ = false;
  rec_.session_id = m.session_id();
  if (m.session_id().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "session_id is required in the first Prefill message"));
  }
  add_bos_ = !m.has_add_bos() || m.add_bos();
  auto lease = backend_.sessions->Acquire(m.session_id(), rec_.tenant);
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  lease_ = *std::move(lease);
  return grpc::Status::OK;
}

grpc::Status PrefillReactor::TooLong(int64_t need) {
  const int64_t max = state_.config().limits.max_prompt_tokens;
  const absl::Status s = LimitExceeded(
      Limit::kMaxPromptTokens, max,
      absl::StrCat("max_prompt_tokens limit exceeded: the request needs ", need,
                   ", the limit is ", max));
  CountLimitRejection(state_.metrics(), s);
  return ToGrpcStatus(s);
}

grpc::Status PrefillReactor::Accept(const v1::PrefillRequest& m) {
  const bool first = first_;
  if (first_) {
    if (grpc::Status s = AcceptFirst(m); !s.ok()) return s;
  } else if (!m.session_id().empty() && m.session_id() != rec_.session_id) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "session_id differs from the first Prefill message"));
  }
  if (m.input_case() == v1::PrefillRequest::INPUT_NOT_SET) {
    return grpc::Status::OK;
  }
  if (m.has_messages() || input_ == Input::kMessages) {
    if (!first) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          "a Prefill call with messages carries them, and no other input, "
          "in its first message only"));
    }
    auto checked = ReadChatMessages(m.messages(), state_.config().limits);
    if (!checked.ok()) {
      CountLimitRejection(state_.metrics(), checked.status());
      return ToGrpcStatus(checked.status());
    }
    input_ = Input::kMessages;
    messages_ = *std::move(checked);
    add_generation_prompt_ = !m.messages().has_add_generation_prompt() ||
                             m.messages().add_generation_prompt();
    return grpc::Status::OK;
  }
  const Input kind = m.has_tokens() ? Input::kTokens : Input::kText;
  if (input_ != Input::kNone && input_ != kind) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "a Prefill call carries either text or token ids, not both"));
  }
  input_ = kind;
  const int64_t max_tokens = state_.config().limits.max_prompt_tokens;
  if (kind == Input::kTokens) {
    ids_.insert(ids_.end(), m.tokens().ids().begin(), m.tokens().ids().end());
    const int64_t n = static_cast<int64_t>(ids_.size());
    return n > max_tokens ? TooLong(n) : grpc::Status::OK;
  }
  text_ += m.text();
  const int64_t bytes = static_cast<int64_t>(text_.size());
  return bytes > max_tokens * kMaxBytesPerToken
             ? TooLong(bytes / kMaxBytesPerToken)
             : grpc::Status::OK;
}

// Text gets BOS when the session is empty (unless add_bos is false); token
// ids are taken as they are.
absl::StatusOr<std::vector<int32_t>> PrefillReactor::Tokens() {
  if (input_ == Input::kTokens) {
    return CheckTokenIds(ids_, backend_.model->config.vocab_size);
  }
  if (input_ == Input::kMessages) return MessageTokens();
  if (text_.empty()) return std::vector<int32_t>();
  const bool bos = add_bos_ && lease_->stats().tokens == 0;
  return EncodeText(*backend_.model->tokenizer, text_, bos);
}

// The messages rendered onto the session's conversation; the template
// writes BOS itself, so add_bos is ignored.
absl::StatusOr<std::vector<int32_t>> PrefillReactor::MessageTokens() {
  update_.input = ConversationUpdate::Input::kMessages;
  if (backend_.chat == nullptr) {
    return absl::FailedPreconditionError(
        "model has no chat template; send text");
  }
  auto turn =
      backend_.chat->Prepare(lease_->conversation(), update_.tokens_before,
                             std::move(messages_), add_generation_prompt_);
  if (!turn.ok()) return turn.status();
  update_.pending = std::move(turn->after);
  return EncodeText(*backend_.model->tokenizer, turn->text, /*add_bos=*/false);
}

grpc::Status PrefillReactor::StartJob() {
  if (first_) {
    return ToGrpcStatus(
        absl::InvalidArgumentError("no Prefill message before half-close"));
  }
  update_.tokens_before = lease_->stats().tokens;
  if (input_ == Input::kText || input_ == Input::kTokens) {
    update_.input = ConversationUpdate::Input::kRaw;
  }
  auto tokens = Tokens();
  if (!tokens.ok()) return ToGrpcStatus(tokens.status());
  update_.input_tokens = static_cast<int64_t>(tokens->size());
  if (tokens->empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("empty input"));
  }
  text_.clear();
  ids_.clear();
  AdmissionRequest a;
  a.input_tokens = static_cast<int64_t>(tokens->size());
  a.session_tokens = lease_->stats().tokens;
  a.kv = lease_->kv();
  a.tenant = lease_->tenant();
  rec_.input_tokens = a.input_tokens;
  JobSpec spec;
  spec.sampling = lease_->sampling();
  spec.lease = std::move(lease_);
  spec.input = *std::move(tokens);
  spec.kind = AppendKind::kPrompt;
  spec.generate = false;
  spec.callbacks.before_release = [this](const JobResult& r, Session& session) {
    ApplyConversationUpdate(update_, r, *backend_.model->tokenizer, session);
  };
  spec.callbacks.on_progress = [this](int64_t done, int64_t total) {
    v1::PrefillResponse r;
    r.mutable_progress()->set_tokens_done(done);
    r.mutable_progress()->set_tokens_total(total);
    Enqueue(std::move(r), /*coalesce=*/true);
  };
  return SubmitJob(backend_, std::move(spec), a);
}

void PrefillReactor::OnJobDone(const JobResult& r) {
  rec_.input_tokens = r.input_tokens;
  if (!r.status.ok()) {
    EndStream(ToGrpcStatus(r.status));
    return;
  }
  if (state_.metrics() != nullptr)
    state_.metrics()->ObservePrefill(r.input_seconds);
  v1::PrefillResponse resp;
  v1::PrefillSummary* s = resp.mutable_summary();
  s->set_prompt_tokens(r.input_tokens);
  s->set_session_tokens(r.session_tokens);
  s->set_clusters_built(r.clusters_built);
  s->set_segments(session_->stats().segments);
  s->set_prefill_seconds(r.input_seconds);
  s->set_tokens_per_second(
      r.input_seconds > 0 ? r.input_tokens / r.input_seconds : 0.0);
  s->set_queue_seconds(r.queue_seconds);
  Enqueue(std::move(resp));
  EndStream(grpc::Status::OK);
}

}  // namespace

grpc::ServerBidiReactor<v1::PrefillRequest, v1::PrefillResponse>*
NewPrefillReactor(ServiceState& state, grpc::CallbackServerContext* ctx) {
  auto* r = new PrefillReactor(state, ctx);
  r->Start();
  return r;
}

}  // namespace ckv::server
