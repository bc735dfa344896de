#include "server/http/generation_job.h"

#include <algorithm>
#include <utility>

#include "server/status_util.h"

namespace ckv::server::http {

GenerationJob::GenerationJob(ServiceState& state, ServiceBackend backend,
                             std::string rpc, std::string tenant)
    : state_(state), backend_(backend) {
  rec_.rpc = std::move(rpc);
  rec_.tenant = std::move(tenant);
  state_.StreamStarted();
}

GenerationJob::~GenerationJob() { EndStream(); }

void GenerationJob::EndStream() {
  bool end = false;
  {
    absl::MutexLock lock(&mu_);
    end = stream_counted_;
    stream_counted_ = false;
  }
  if (end) state_.StreamEnded();
}

void GenerationJob::SetCreatedSession(const std::string& id,
                                      bool close_at_end) {
  created_id_ = id;
  close_at_end_ = close_at_end;
}

absl::Status GenerationJob::Submit(JobSpec spec,
                                   const AdmissionRequest& admission) {
  auto ticket = backend_.admission->Admit(admission);
  if (!ticket.ok()) {
    spec.lease = SessionLease();  // released before the session is closed
    CloseCreated();
    EndStream();
    return ticket.status();
  }
  return SubmitAdmitted(std::move(spec), *std::move(ticket));
}

absl::Status GenerationJob::SubmitAdmitted(
    JobSpec spec, std::unique_ptr<AdmissionTicket> ticket) {
  rec_.session_id = spec.lease->id();
  rec_.input_tokens = static_cast<int64_t>(spec.input.size());
  ticket_ = std::move(ticket);
  session_ = spec.lease.shared();
  before_ = session_->stats();
  std::shared_ptr<GenerationJob> self = shared_from_this();
  spec.callbacks.on_token = [self](int32_t token, absl::string_view text,
                                   const TokenLogprobs* logprobs) {
    self->OnToken(token, text, logprobs);
  };
  spec.callbacks.on_done = [self](const JobResult& r) { self->OnDone(r); };
  auto handle = backend_.engine->Submit(std::move(spec));
  if (!handle.ok()) {
    ticket_.reset();
    CountLimitRejection(state_.metrics(), handle.status());
    // The spec (and its lease) was consumed by Submit and released.
    CloseCreated();
    EndStream();
    return handle.status();
  }
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    handle_ = *handle;
    cancel = cancelled_;
  }
  if (cancel) (*handle)->Cancel();
  return absl::OkStatus();
}

void GenerationJob::OnToken(int32_t token, absl::string_view text,
                            const TokenLogprobs* logprobs) {
  if (text.empty() && logprobs == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    TokenPiece& p = pending_.emplace_back();
    p.token = token;
    p.text.assign(text.data(), text.size());
    if (logprobs != nullptr) {
      p.has_logprobs = true;
      p.logprobs = *logprobs;
    }
  }
  Wake();
}

void GenerationJob::Wake() {
  std::shared_ptr<std::function<void()>> listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
    // After the end there is nothing more to report: dropping the listener
    // breaks the cycle job -> listener -> exchange -> job.
    if (done_) listener_ = nullptr;
  }
  if (listener != nullptr) (*listener)();
}

void GenerationJob::SetListener(std::function<void()> wake) {
  {
    absl::MutexLock lock(&mu_);
    listener_ = std::make_shared<std::function<void()>>(std::move(wake));
  }
  Wake();
}

// Engine thread; the lease was released before, so a created session can be
// closed here.
void GenerationJob::OnDone(const JobResult& r) {
  ticket_.reset();
  RecordMetrics(r);
  if (close_at_end_) CloseCreated();
  rec_.input_tokens = r.input_tokens;
  rec_.generated_tokens = r.generated_tokens;
  if (r.generated_tokens > 0) rec_.ttft_seconds = r.time_to_first_token_seconds;
  absl::Status status = r.status;
  if (status.code() == absl::StatusCode::kCancelled && state_.draining()) {
    status = absl::UnavailableError("server is draining: request cancelled");
  }
  if (log_sink_) {
    log_sink_(rec_, ToGrpcStatus(status));
  } else {
    LogRequest(state_.metrics(), rec_, ToGrpcStatus(status));
  }
  {
    absl::MutexLock lock(&mu_);
    result_ = r;
    result_.status = status;
    done_ = true;
  }
  EndStream();
  Wake();
}

// Same accounting as the gRPC streams (server/stream_reactor.h).
void GenerationJob::RecordMetrics(const JobResult& r) {
  ServerMetrics* m = state_.metrics();
  if (m == nullptr) return;
  if (r.status.ok()) m->AddPromptTokens(r.input_tokens);
  m->AddGeneratedTokens(r.generated_tokens);
  if (r.generated_tokens > 0) {
    m->ObserveTimeToFirstToken(r.time_to_first_token_seconds);
  }
  if (session_ == nullptr) return;
  const CacheStats after = session_->stats().cache;
  const int64_t lookups = after.lookups - before_.cache.lookups;
  const int64_t hits = after.hits - before_.cache.hits;
  const int64_t h2d = after.h2d_bytes - before_.cache.h2d_bytes;
  if (lookups > 0) m->AddCacheLookups(lookups, std::max<int64_t>(0, hits));
  if (h2d > 0) m->AddHostToDeviceBytes(h2d);
}

void GenerationJob::CloseCreated() {
  if (created_id_.empty()) return;
  (void)backend_.sessions->Close(created_id_, rec_.tenant);
  created_id_.clear();
}

bool GenerationJob::Take(std::vector<TokenPiece>* out) {
  absl::MutexLock lock(&mu_);
  for (TokenPiece& p : pending_) out->push_back(std::move(p));
  pending_.clear();
  return done_;
}

void GenerationJob::Cancel() {
  std::shared_ptr<JobHandle> handle;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    handle = handle_;
  }
  if (handle != nullptr) handle->Cancel();
}

}  // namespace ckv::server::http
