// One generation started by the HTTP API on the shared engine: the engine's
// callbacks (engine thread, never blocking) append tokens and report the
// end and wake the listener; the connection's I/O thread then takes what is
// there (never waiting). Owned by a shared_ptr held by both, so either side
// may finish first.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/admission.h"
#include "server/engine_loop.h"
#include "server/http/openai_json.h"
#include "server/request_log.h"
#include "server/service_state.h"
#include "server/session.h"

namespace ckv::server::http {

// Where a job's request record goes when it ends (by default one log line
// and one clusterkv_requests_total count, LogRequest): the parts of one n > 1
// request hand theirs to the request's RequestLogGroup instead.
using RequestLogSink =
    std::function<void(const RequestRecord&, const grpc::Status&)>;

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  // Counts as a live stream of `state` (drain waits for it) until the job
  // ends or Abandon() is called.
  GenerationJob(ServiceState& state, ServiceBackend backend, std::string rpc,
                std::string tenant);
  ~GenerationJob();
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // A session this request created: closed when the job ends (one-shot) or
  // when Submit fails (a one-shot, a new persistent one or a fork child).
  void SetCreatedSession(const std::string& id, bool close_at_end);
  // Before Submit: the ended job's record goes to `sink`, not to the log.
  void SetLogSink(RequestLogSink sink) { log_sink_ = std::move(sink); }
  // Admits and submits `spec` (its callbacks are set here). On error nothing
  // runs, a created session is closed and the job is finished (the caller
  // logs the request). Once submitted, the job logs it when it ends.
  absl::Status Submit(JobSpec spec, const AdmissionRequest& admission);
  // As Submit, with the admission already granted (`ticket`, not null).
  absl::Status SubmitAdmitted(JobSpec spec,
                              std::unique_ptr<AdmissionTicket> ticket);

  // `wake` runs (on the engine thread or here, never blocking; it must not
  // call back into this job) whenever tokens or the end arrive, and once
  // now. Set once.
  void SetListener(std::function<void()> wake);
  // Never blocks: moves the pieces produced since the last call into
  // `out`; true once the job has ended (everything then taken).
  bool Take(std::vector<TokenPiece>* out);
  // The result; valid once Take returned true.
  const JobResult& result() const { return result_; }
  // Cancels the job (client gone); it still ends through on_done.
  void Cancel();

 private:
  void OnToken(int32_t token, absl::string_view text,
               const TokenLogprobs* logprobs);
  void Wake();
  void OnDone(const JobResult& r);
  void RecordMetrics(const JobResult& r);
  void CloseCreated();
  void EndStream();

  ServiceState& state_;
  const ServiceBackend backend_;
  RequestRecord rec_;
  RequestLogSink log_sink_;
  std::string created_id_;
  bool close_at_end_ = false;
  std::unique_ptr<AdmissionTicket> ticket_;  // engine thread after Submit
  std::shared_ptr<Session> session_;
  SessionStats before_;
  bool stream_counted_ = true;  // guarded by mu_

  absl::Mutex mu_;
  std::vector<TokenPiece> pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::function<void()>> listener_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  JobResult result_;  // written once under mu_ before done_
  std::shared_ptr<JobHandle> handle_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ckv::server::http
