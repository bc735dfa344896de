// Base of the streaming reactors (Prefill, Decode, Generate): a write queue
// fed from any thread (the engine's callbacks must never block) and drained
// one StartWrite at a time, the job's lifetime (admission ticket, cancel
// handle) and the final Finish, sent only after the job reported on_done and
// every queued response was written.
//
// Lifetime: one reference for gRPC (dropped in OnDone) and one for a
// submitted job (dropped at the end of its on_done); the last one deletes.
// Internal to server/service_*.cc (it includes gRPC headers).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "server/request_log.h"
#include "server/service_state.h"
#include "server/status_util.h"

namespace ckv::server {

template <class Base, class Response>
class StreamReactor : public Base {
 public:
  StreamReactor(ServiceState& state, grpc::CallbackServerContext* ctx,
                std::string rpc)
      : state_(state), ctx_(ctx) {
    rec_.rpc = std::move(rpc);
    state_.StreamStarted();
  }
  ~StreamReactor() override { state_.StreamEnded(); }

  void OnWriteDone(bool ok) override;
  // Client cancellation or deadline: the job is cancelled; the engine
  // restores the session and reports on_done(CANCELLED), then we Finish.
  void OnCancel() override { CancelJob(/*from_cancel=*/true); }
  void OnDone() override { Unref(); }

 protected:
  // Queues a response. With `coalesce`, replaces the last queued response if
  // that one was coalescable too (progress events) and not yet sent.
  void Enqueue(Response r, bool coalesce = false);
  // Finishes the call with `s` once every queued response was written.
  void EndStream(const grpc::Status& s);
  // Admits and submits `spec` (its on_done is set here and calls OnJobDone
  // on the engine thread). On error nothing was submitted.
  grpc::Status SubmitJob(const ServiceBackend& b, JobSpec spec,
                         const AdmissionRequest& admission);
  virtual void OnJobDone(const JobResult& r) = 0;
  // Runs `work` on the state's blocking pool, never on the calling gRPC
  // callback thread: work that may block or take long (leasing a session
  // that is restored from disk, tokenizing a long text, rendering a chat
  // template). The reactor stays alive until `work` has returned. While the
  // server shuts down (the pool is closed) `work` runs here.
  void RunBlocking(std::function<void()> work);

  ServiceState& state_;
  grpc::CallbackServerContext* const ctx_;
  RequestRecord rec_;
  std::shared_ptr<Session> session_;  // of the submitted job

 private:
  void HandleJobDone(const JobResult& r);
  void RecordCacheDeltas();
  void CancelJob(bool from_cancel);
  grpc::Status FinalStatus(const grpc::Status& s) const;
  void DoFinish(const grpc::Status& s);
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  std::atomic<int> refs_{1};
  std::unique_ptr<AdmissionTicket> ticket_;
  SessionStats before_;
  absl::Mutex mu_;
  std::deque<Response> queue_ ABSL_GUARDED_BY(mu_);
  Response in_flight_;  // owned by gRPC between StartWrite and OnWriteDone
  bool back_coalescable_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<JobHandle> handle_ ABSL_GUARDED_BY(mu_);
};

template <class Base, class Response>
void StreamReactor<Base, Response>::Enqueue(Response r, bool coalesce) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_ || finish_requested_) return;
    if (coalesce && back_coalescable_ && !queue_.empty()) {
      queue_.back() = std::move(r);
      return;
    }
    queue_.push_back(std::move(r));
    back_coalescable_ = coalesce;
    if (writing_) return;
    writing_ = true;
    in_flight_ = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty()) back_coalescable_ = false;
  }
  this->StartWrite(&in_flight_);
}

template <class Base, class Response>
void StreamReactor<Base, Response>::OnWriteDone(bool ok) {
  bool write = false, finish = false;
  grpc::Status status;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      broken_ = true;
      queue_.clear();
    }
    if (!queue_.empty()) {
      writing_ = write = true;
      in_flight_ = std::move(queue_.front());
      queue_.pop_front();
      if (queue_.empty()) back_coalescable_ = false;
    } else if (finish_requested_ && !finished_) {
      finished_ = finish = true;
      status = final_;
    }
  }
  if (!ok) CancelJob(/*from_cancel=*/false);
  if (write) this->StartWrite(&in_flight_);
  if (finish) DoFinish(status);
}

template <class Base, class Response>
void StreamReactor<Base, Response>::EndStream(const grpc::Status& s) {
  {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    finish_requested_ = true;
    final_ = s;
    if (writing_) return;  // OnWriteDone finishes after the queue drains
    finished_ = true;
  }
  DoFinish(s);
}

template <class Base, class Response>
grpc::Status StreamReactor<Base, Response>::SubmitJob(
    const ServiceBackend& b, JobSpec spec, const AdmissionRequest& admission) {
  auto ticket = b.admission->Admit(admission);
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  ticket_ = *std::move(ticket);
  session_ = spec.lease.shared();
  before_ = session_->stats();
  spec.callbacks.on_done = [this](const JobResult& r) { HandleJobDone(r); };
  refs_.fetch_add(1);
  auto handle = b.engine->Submit(std::move(spec));
  if (!handle.ok()) {
    refs_.fetch_sub(1);  // the gRPC reference keeps us alive
    ticket_.reset();
    CountLimitRejection(state_.metrics(), handle.status());
    return ToGrpcStatus(handle.status());
  }
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    handle_ = *handle;
    cancel = cancelled_ || broken_;
  }
  if (cancel) (*handle)->Cancel();
  return grpc::Status::OK;
}

template <class Base, class Response>
void StreamReactor<Base, Response>::RunBlocking(std::function<void()> work) {
  refs_.fetch_add(1);
  auto task = [this, work = std::move(work)] {
    work();
    Unref();
  };
  if (!state_.blocking_pool().Post(task)) task();
}

template <class Base, class Response>
void StreamReactor<Base, Response>::HandleJobDone(const JobResult& r) {
  ticket_.reset();
  RecordCacheDeltas();
  ServerMetrics* m = state_.metrics();
  if (m != nullptr) {
    if (r.status.ok()) m->AddPromptTokens(r.input_tokens);
    m->AddGeneratedTokens(r.generated_tokens);
    if (r.generated_tokens > 0) {
      m->ObserveTimeToFirstToken(r.time_to_first_token_seconds);
    }
  }
  OnJobDone(r);
  Unref();
}

// Cache lookups, hits and host->device bytes of this job (a cancelled job's
// restored store may count less than before: nothing is added then).
template <class Base, class Response>
void StreamReactor<Base, Response>::RecordCacheDeltas() {
  ServerMetrics* m = state_.metrics();
  if (m == nullptr || session_ == nullptr) return;
  const CacheStats after = session_->stats().cache;
  const int64_t lookups = after.lookups - before_.cache.lookups;
  const int64_t hits = after.hits - before_.cache.hits;
  const int64_t h2d = after.h2d_bytes - before_.cache.h2d_bytes;
  if (lookups > 0) m->AddCacheLookups(lookups, std::max<int64_t>(0, hits));
  if (h2d > 0) m->AddHostToDeviceBytes(h2d);
}

template <class Base, class Response>
void StreamReactor<Base, Response>::CancelJob(bool from_cancel) {
  std::shared_ptr<JobHandle> handle;
  {
    absl::MutexLock lock(&mu_);
    if (from_cancel) cancelled_ = true;
    handle = handle_;
  }
  if (handle != nullptr) handle->Cancel();
}

// The status the client sees: its own cancellation or deadline wins; a job
// cancelled by the drain is UNAVAILABLE.
template <class Base, class Response>
grpc::Status StreamReactor<Base, Response>::FinalStatus(
    const grpc::Status& s) const {
  if (ctx_->IsCancelled()) {
    if (ctx_->deadline() <= std::chrono::system_clock::now()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "deadline exceeded");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by client");
  }
  if (s.error_code() == grpc::StatusCode::CANCELLED && state_.draining()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "server is draining: call cancelled");
  }
  return s;
}

template <class Base, class Response>
void StreamReactor<Base, Response>::DoFinish(const grpc::Status& s) {
  const grpc::Status final_status = FinalStatus(s);
  LogRequest(state_.metrics(), rec_, final_status);
  this->Finish(final_status);
}

}  // namespace ckv::server
