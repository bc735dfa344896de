// n > 1 on the OpenAI-compatible API (docs/http-api.md, "Several
// choices"): the prompt is prefilled once in the request's one-shot
// session, which is then forked so that N sessions (the parent for choice
// 0, N - 1 children sharing its segments) decode in the same engine steps,
// choice i with its own seed. Every choice's KV is admitted (its ticket
// issued) before the prefill runs. No HTTP library here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/admission.h"
#include "server/http/generation_job.h"
#include "server/service_state.h"

namespace ckv::server::http {

using ChoiceJobs = std::vector<std::shared_ptr<GenerationJob>>;

// One log line and one clusterkv_requests_total count for a request made of
// parts (the prefill and its n choices): each part's sink merges its record
// (tokens summed, the earliest time to first token, the first failure); the
// line is written once Seal was called and every part added has reported.
// Thread-safe.
class RequestLogGroup : public std::enable_shared_from_this<RequestLogGroup> {
 public:
  // Made with std::make_shared (the sinks hold it).
  RequestLogGroup(ServerMetrics* metrics, RequestRecord base);
  // A part that reports through the returned sink (exactly once, or never
  // if it fails to start: its caller then reports the failure in Seal).
  RequestLogSink AddPart();
  // No more parts; `status` is the request's own failure outside its
  // parts, if any (a choice refused). Call once.
  void Seal(const grpc::Status& status = grpc::Status::OK);

 private:
  void Merge(const RequestRecord& part, const grpc::Status& status);
  void LogIfDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ServerMetrics* const metrics_;
  absl::Mutex mu_;
  RequestRecord rec_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool sealed_ ABSL_GUARDED_BY(mu_) = false;
  bool logged_ ABSL_GUARDED_BY(mu_) = false;
};

// What the choices run with once the prompt is in.
struct ChoicePlan {
  SamplingParams sampling;  // validated; its seed is choice 0's
  bool seeded = false;      // the request named a seed: choice i gets seed + i
  std::string rpc, tenant;
  std::string parent_id;  // the one-shot session the prefill fills
  // One per choice (n of them): each choice's generated tokens.
  std::vector<std::unique_ptr<AdmissionTicket>> tickets;
  // The request's one log line (the prefill is its first part).
  std::shared_ptr<RequestLogGroup> log;
};

// The seed of choice `index`: `seed` + index when the request named one
// (reproducible), else a fresh random one.
uint64_t ChoiceSeed(uint64_t seed, bool seeded, int index);

class ChoiceGroup : public std::enable_shared_from_this<ChoiceGroup> {
 public:
  // `prefill` is submitted (generate false) on plan.parent_id and does not
  // close it; this group closes it unless a choice takes it over.
  ChoiceGroup(ServiceState& state, ServiceBackend backend, ChoicePlan plan,
              std::shared_ptr<GenerationJob> prefill);

  // Once the prefill has ended, on the blocking pool: forks the parent,
  // submits one decode job per choice and calls `ready` with the jobs in
  // index order; or, when the prefill failed or was cancelled or a session
  // or queue limit stops a choice, with that status (nothing then runs and
  // every session this request made is closed). Call once.
  void Run(std::function<void(absl::StatusOr<ChoiceJobs>)> ready);
  // The client is gone: cancels the prefill, or every choice.
  void Cancel();

 private:
  void OnPrefilled();  // the prefill has ended
  absl::StatusOr<ChoiceJobs> StartChoices();
  // Leases session `id` and submits choice `index` on it (the job closes
  // the session when it ends, or at once if it cannot start).
  absl::StatusOr<std::shared_ptr<GenerationJob>> StartChoice(
      const std::string& id, int index);
  void CloseSessions(const std::vector<std::string>& ids);

  ServiceState& state_;
  const ServiceBackend backend_;
  ChoicePlan plan_;
  const std::shared_ptr<GenerationJob> prefill_;
  std::function<void(absl::StatusOr<ChoiceJobs>)> ready_;
  std::shared_ptr<std::atomic<bool>> scheduled_ =
      std::make_shared<std::atomic<bool>>(false);

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  ChoiceJobs jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckv::server::http
