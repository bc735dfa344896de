#include "server/http/choice_group.h"

#include <atomic>
#include <random>
#include <utility>

#include "server/request_log.h"
#include "server/status_util.h"

namespace ckv::server::http {

uint64_t ChoiceSeed(uint64_t seed, bool seeded, int index) {
  if (seeded) return seed + static_cast<uint64_t>(index);
  thread_local std::mt19937_64 rng(std::random_device{}());
  return index == 0 ? seed : rng();
}

RequestLogGroup::RequestLogGroup(ServerMetrics* metrics, RequestRecord base)
    : metrics_(metrics), rec_(std::move(base)) {}

RequestLogSink RequestLogGroup::AddPart() {
  {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  return [self = shared_from_this()](const RequestRecord& part,
                                     const grpc::Status& status) {
    self->Merge(part, status);
  };
}

void RequestLogGroup::Merge(const RequestRecord& part,
                            const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  rec_.input_tokens += part.input_tokens;
  rec_.generated_tokens += part.generated_tokens;
  if (part.ttft_seconds >= 0 &&
      (rec_.ttft_seconds < 0 || part.ttft_seconds < rec_.ttft_seconds)) {
    rec_.ttft_seconds = part.ttft_seconds;
  }
  if (status_.ok() && !status.ok()) status_ = status;
  --pending_;
  LogIfDone();
}

void RequestLogGroup::Seal(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status_.ok() && !status.ok()) status_ = status;
  sealed_ = true;
  LogIfDone();
}

void RequestLogGroup::LogIfDone() {
  if (!sealed_ || pending_ > 0 || logged_) return;
  logged_ = true;
  LogRequest(metrics_, rec_, status_);
}

ChoiceGroup::ChoiceGroup(ServiceState& state, ServiceBackend backend,
                         ChoicePlan plan,
                         std::shared_ptr<GenerationJob> prefill)
    : state_(state),
      backend_(backend),
      plan_(std::move(plan)),
      prefill_(std::move(prefill)) {}

void ChoiceGroup::Run(std::function<void(absl::StatusOr<ChoiceJobs>)> ready) {
  ready_ = std::move(ready);
  std::shared_ptr<ChoiceGroup> self = shared_from_this();
  // The wake runs on the engine thread: the forks run on the blocking pool.
  // The prefill generates nothing, so the task finds it done at its end.
  prefill_->SetListener([self]() {
    if (self->scheduled_->exchange(true)) return;
    auto task = [self]() { self->OnPrefilled(); };
    if (!self->state_.blocking_pool().Post(task)) {
      self->Cancel();  // stopping: ends the prefill, the task is not run
    }
  });
}

void ChoiceGroup::OnPrefilled() {
  std::vector<TokenPiece> none;
  if (!prefill_->Take(&none)) {
    scheduled_->store(false);  // not ended yet (the listener's first call)
    // Ended meanwhile: its wake found the flag set, so run again.
    if (!prefill_->Take(&none) || scheduled_->exchange(true)) return;
  }
  const absl::Status status = prefill_->result().status;
  bool cancelled = false;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
  }
  auto ready = std::move(ready_);
  ready_ = nullptr;
  if (!status.ok() || cancelled) {
    plan_.tickets.clear();  // the reservations end with the request
    CloseSessions({plan_.parent_id});
    plan_.log->Seal();  // the prefill's part says why
    ready(status.ok() ? absl::CancelledError("client gone") : status);
    return;
  }
  auto jobs = StartChoices();
  plan_.tickets.clear();  // those no choice took (a choice failed to start)
  plan_.log->Seal(jobs.ok() ? grpc::Status::OK : ToGrpcStatus(jobs.status()));
  ready(std::move(jobs));
}

absl::StatusOr<ChoiceJobs> ChoiceGroup::StartChoices() {
  const int n = static_cast<int>(plan_.tickets.size());
  std::vector<std::string> ids = {plan_.parent_id};
  for (int i = 1; i < n; ++i) {
    auto child = backend_.sessions->Fork(plan_.parent_id, plan_.tenant);
    if (!child.ok()) {
      CountLimitRejection(state_.metrics(), child.status());
      CloseSessions(ids);
      return child.status();
    }
    ids.push_back((*child)->id());
  }
  ChoiceJobs jobs;
  for (int i = 0; i < n; ++i) {
    auto job = StartChoice(ids[i], i);
    if (!job.ok()) {
      CloseSessions({ids.begin() + i + 1, ids.end()});
      for (auto& j : jobs) j->Cancel();
      return job.status();
    }
    jobs.push_back(*std::move(job));
  }
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    jobs_ = jobs;
    cancel = cancelled_;
  }
  if (cancel) {
    for (auto& j : jobs) j->Cancel();
  }
  return jobs;
}

absl::StatusOr<std::shared_ptr<GenerationJob>> ChoiceGroup::StartChoice(
    const std::string& id, int index) {
  auto lease = backend_.sessions->Acquire(id, plan_.tenant);
  if (!lease.ok()) {
    CloseSessions({id});
    return lease.status();
  }
  JobSpec spec;
  spec.lease = *std::move(lease);
  spec.kind = AppendKind::kGenerated;
  spec.generate = true;  // from the prompt's logits (copied by the fork)
  spec.sampling = plan_.sampling;
  spec.sampling.seed = ChoiceSeed(plan_.sampling.seed, plan_.seeded, index);
  auto job = std::make_shared<GenerationJob>(state_, backend_, plan_.rpc,
                                             plan_.tenant);
  job->SetCreatedSession(id, /*close_at_end=*/true);
  RequestLogSink part = plan_.log->AddPart();
  job->SetLogSink(part);
  auto s =
      job->SubmitAdmitted(std::move(spec), std::move(plan_.tickets[index]));
  if (!s.ok()) {
    part(RequestRecord{}, ToGrpcStatus(s));  // never ran: no tokens
    return s;
  }
  return job;
}

void ChoiceGroup::CloseSessions(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    (void)backend_.sessions->Close(id, plan_.tenant);
  }
}

void ChoiceGroup::Cancel() {
  ChoiceJobs jobs;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    jobs = jobs_;
  }
  prefill_->Cancel();
  for (auto& j : jobs) j->Cancel();
}

}  // namespace ckv::server::http
