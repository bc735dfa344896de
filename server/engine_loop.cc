#include "server/engine_loop.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "model/backend/cpu/cpu_backend.h"
#include "server/input_order.h"
#include "server/limits.h"

namespace ckv::server {

using Clock = std::chrono::steady_clock;

namespace {
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

struct EngineLoop::Job {
  enum class Phase { kInput, kGenerating, kIndexing, kDone };

  JobSpec spec;
  std::shared_ptr<JobHandle> handle;
  // The session before this job: restored on cancellation or error.
  std::unique_ptr<ClusteredKvStore> checkpoint;
  std::vector<float> checkpoint_logits;
  Phase phase = Phase::kInput;
  bool continue_now = false;  // no input: sample from the session's logits
  // Generation ended on a streamed token (next_token) that the next step
  // appends to the session before the job finishes.
  bool append_last = false;
  bool started = false;
  bool reserved = false;
  int64_t consumed = 0;
  int64_t chunk = 0;    // input tokens fed in the current step
  int input_waits = 0;  // server/input_order.h
  std::vector<float> logits;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamingDetokenizer> detok;
  std::unique_ptr<StopMatcher> stops;
  int32_t next_token = -1;
  std::vector<int32_t> generated;  // streamed token ids
  // Cancelled with keep_partial_on_cancel: the step in progress stores the
  // last generated token, then the job ends CANCELLED keeping the session.
  bool keep_partial = false;
  JobResult result;
  Clock::time_point submitted, first_step, first_token, last_token;

  ClusteredKvStore& store() { return spec.lease->store(); }
};

EngineLoop::EngineLoop(const Model& model, const TransformerOptions& options,
                       int max_queued)
    : EngineLoop(model, options, max_queued,
                 std::make_unique<CpuBackend>(
                     BackendOptions{.threads = options.threads})) {}

EngineLoop::EngineLoop(const Model& model, const TransformerOptions& options,
                       int max_queued, std::unique_ptr<Backend> backend,
                       double prefill_share)
    : model_(model),
      transformer_(model.config, model.weights, options, std::move(backend)),
      backend_info_(transformer_.backend().info()),
      input_budget_({.share = prefill_share,
                     .max_tokens = std::max(1, options.prefill_chunk)}),
      max_queued_(max_queued),
      thread_([this] { Loop(); }) {}

EngineLoop::~EngineLoop() {
  CancelAll();
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::StatusOr<std::shared_ptr<JobHandle>> EngineLoop::Submit(JobSpec spec) {
  auto job = std::make_unique<Job>();
  job->spec = std::move(spec);
  job->handle = std::make_shared<JobHandle>();
  job->submitted = Clock::now();
  auto handle = job->handle;
  // CancelSession reaches the job through its session until the lease ends.
  if (job->spec.lease) {
    job->spec.lease->SetCanceller([handle] { handle->Cancel(); });
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("server is draining");
  if (static_cast<int>(queue_.size()) >= max_queued_) {
    return LimitExceeded(Limit::kMaxQueuedRequests, max_queued_,
                         absl::StrCat("max_queued_requests limit reached (",
                                      max_queued_, " queued)"));
  }
  queue_.push_back(std::move(job));
  cv_.notify_all();
  return handle;
}

void EngineLoop::StopAccepting() {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
}

bool EngineLoop::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                      [this] { return queue_.empty() && active_count_ == 0; });
}

void EngineLoop::CancelAll() {
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& j : queue_) j->handle->Cancel();
  cancel_all_ = true;
}

void EngineLoop::SetRecallSampler(std::unique_ptr<RecallSampler> sampler) {
  std::unique_lock<std::mutex> lock(mu_);
  recall_ = std::move(sampler);
}

EngineStats EngineLoop::stats() const {
  std::unique_lock<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

void EngineLoop::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this] { return stop_ || !queue_.empty() || !active_.empty(); });
      if (stop_ && queue_.empty() && active_.empty()) return;
      while (!queue_.empty()) {
        active_.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (cancel_all_) {
        for (auto& j : active_) j->handle->Cancel();
        cancel_all_ = false;
      }
      active_count_ = static_cast<int>(active_.size());
      stats_.active = active_count_;
    }
    if (!RunStep()) std::this_thread::sleep_for(std::chrono::microseconds(500));
    const int waiting_input = static_cast<int>(std::count_if(
        active_.begin(), active_.end(),
        [](const auto& j) { return j->phase == Job::Phase::kInput; }));
    {
      std::unique_lock<std::mutex> lock(mu_);
      active_count_ = static_cast<int>(active_.size());
      stats_.active = active_count_;
      stats_.waiting_input = waiting_input;
    }
    cv_.notify_all();  // WaitIdle
  }
}

// Validates the input, takes the checkpoint and sets up sampling.
absl::Status EngineLoop::StartJob(Job& job) {
  job.started = true;
  job.first_step = Clock::now();
  job.result.queue_seconds = Seconds(job.submitted, job.first_step);
  const int vocab = model_.config.vocab_size;
  for (int32_t t : job.spec.input) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", t, " outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (job.spec.input.empty() && job.store().num_tokens() == 0) {
    return absl::InvalidArgumentError("empty input on an empty session");
  }
  if (auto s = ValidateSamplingParams(job.spec.sampling, vocab); !s.ok()) {
    return s;
  }
  auto checkpoint = job.store().Fork();
  if (!checkpoint.ok()) return checkpoint.status();
  job.checkpoint = *std::move(checkpoint);
  job.result.input_tokens = static_cast<int64_t>(job.spec.input.size());
  if (job.spec.generate) {
    job.sampler = std::make_unique<Sampler>(job.spec.sampling);
    for (int32_t t : job.spec.lease->recent_tokens()) job.sampler->Accept(t);
    for (int32_t t : job.spec.input) job.sampler->Accept(t);
    job.detok =
        std::make_unique<StreamingDetokenizer>(*model_.tokenizer, false);
    job.stops = std::make_unique<StopMatcher>(job.spec.sampling.stop);
  }
  job.checkpoint_logits = job.spec.lease->last_logits();
  if (job.spec.input.empty()) {
    // Continue from the session's last logits.
    if (job.checkpoint_logits.empty()) {
      return absl::InvalidArgumentError(
          "the session has no logits to continue from");
    }
    job.logits = job.checkpoint_logits;
    job.phase = Job::Phase::kGenerating;
    job.continue_now = true;
  }
  return absl::OkStatus();
}

void EngineLoop::DropFinished() {
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const auto& j) {
                                 return j->phase == Job::Phase::kDone;
                               }),
                active_.end());
}

// One step: jobs advance (cancel, start, indexing done), the scheduler
// batches decode tokens and input chunks, the backend runs the batch, then
// each job samples and streams (AfterStep).
bool EngineLoop::RunStep() {
  AdvanceJobs();
  StepBatch batch;
  BuildBatch(&batch);
  if (batch.inputs.empty()) {
    DropFinished();
    return false;
  }
  const absl::Status status = RunModel(batch);
  for (size_t i = 0; i < batch.owners.size(); ++i) {
    if (!status.ok()) {
      Finish(*batch.owners[i], absl::InternalError(absl::StrCat(
                                   "model step failed: ", status.message())));
      continue;
    }
    AfterStep(*batch.owners[i], /*fed_input=*/i >= batch.n_decode);
  }
  DropFinished();
  return true;
}

// Cancellations, job starts and jobs waiting for their segment's index.
void EngineLoop::AdvanceJobs() {
  for (auto& job : active_) {
    if (job->phase == Job::Phase::kDone) continue;
    if (job->handle->cancelled()) {
      if (KeepsPartial(*job)) {
        job->keep_partial = true;  // this step stores next_token first
      } else if (!job->keep_partial) {
        Finish(*job, absl::CancelledError("cancelled"));
      }
    } else if (!job->started) {
      if (auto s = StartJob(*job); !s.ok()) {
        Finish(*job, s);
      } else if (job->continue_now) {
        job->continue_now = false;
        if (job->spec.sampling.max_tokens == 0) {
          EndGeneration(*job, FinishReason::kLength, /*last_token=*/-1);
        } else {
          EmitToken(*job);
        }
      }
    } else if (job->phase == Job::Phase::kIndexing &&
               job->store().IndexReady()) {
      Finish(*job, absl::OkStatus());
    }
  }
}

// The step's rows: one token of every generating job, then input chunks.
void EngineLoop::BuildBatch(StepBatch* batch) {
  for (auto& job : active_) {
    if (job->phase != Job::Phase::kGenerating) continue;
    batch->inputs.push_back(MakeInput(absl::MakeConstSpan(&job->next_token, 1),
                                      &job->store(), LogitsMode::kLast,
                                      &job->logits, AppendKind::kGenerated));
    batch->owners.push_back(job.get());
    if (recall_ != nullptr) recall_->BeforeDecode(job->store());
  }
  batch->n_decode = batch->inputs.size();
  AddInputChunks(batch);
}

// Input (prefill chunks, questions): up to server/input_budget.h's tokens
// per step (prefill_chunk, or fewer while sessions decode), in
// server/input_order.h's order (shortest remaining first, with aging),
// so a question never waits behind a long document, a long prefill
// advances by at most one chunk per step and is never starved. A job whose
// input does not fit its session finishes with the Reserve error.
void EngineLoop::AddInputChunks(StepBatch* batch) {
  std::vector<Job*> inputs;
  for (auto& job : active_) {
    if (job->phase == Job::Phase::kInput) inputs.push_back(job.get());
  }
  auto candidate = [](const Job* j) {
    return InputCandidate{
        static_cast<int64_t>(j->spec.input.size()) - j->consumed,
        j->input_waits};
  };
  std::stable_sort(inputs.begin(), inputs.end(), [&](Job* a, Job* b) {
    return InputGoesFirst(candidate(a), candidate(b));
  });
  for (Job* job : inputs) job->chunk = 0;
  const int64_t step_budget = input_budget_.Next(
      static_cast<int>(batch->n_decode), static_cast<int>(inputs.size()));
  int64_t budget = step_budget;
  for (Job* job : inputs) {
    if (budget == 0) break;
    const int64_t total = static_cast<int64_t>(job->spec.input.size());
    if (!job->reserved) {
      if (auto s = job->store().Reserve(total, job->spec.kind); !s.ok()) {
        Finish(*job, s);
        continue;
      }
      job->reserved = true;
    }
    const int64_t chunk = std::min(budget, total - job->consumed);
    budget -= chunk;
    job->chunk = chunk;
    const bool last = job->consumed + chunk == total;
    SequenceInput in = MakeInput(
        absl::MakeConstSpan(job->spec.input).subspan(job->consumed, chunk),
        &job->store(), last ? LogitsMode::kLast : LogitsMode::kNone,
        &job->logits, job->spec.kind);
    in.reserved = true;
    batch->inputs.push_back(in);
    batch->owners.push_back(job);
  }
  batch->input_tokens = step_budget - budget;
  if (step_budget == 0) return;  // a decode-only step passes nobody over
  for (Job* job : inputs) {
    job->input_waits = NextWaits(job->input_waits, job->chunk);
  }
}

// The backend step over the batch, then the step counters.
absl::Status EngineLoop::RunModel(StepBatch& batch) {
  const auto start = Clock::now();
  const absl::Status status =
      transformer_.Forward(absl::MakeSpan(batch.inputs));
  if (status.ok()) {
    input_budget_.Record(static_cast<int>(batch.n_decode), batch.input_tokens,
                         Seconds(start, Clock::now()));
  }
  if (recall_ != nullptr) recall_->AfterStep(status.ok());
  bool first_failure = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.batched_tokens +=
        static_cast<int64_t>(batch.n_decode) + batch.input_tokens;
    stats_.decoded_tokens += static_cast<int64_t>(batch.n_decode);
    const absl::Status backend = transformer_.backend().status();
    if (!backend.ok() && backend_failure_.ok()) {
      backend_failure_ = backend;
      first_failure = true;
    }
  }
  if (first_failure && on_backend_failure_) {
    on_backend_failure_(transformer_.backend().status());
  }
  return status;
}

absl::Status EngineLoop::backend_failure() const {
  std::unique_lock<std::mutex> lock(mu_);
  return backend_failure_;
}

void EngineLoop::SetBackendFailureListener(
    std::function<void(const absl::Status&)> fn) {
  on_backend_failure_ = std::move(fn);
}

void EngineLoop::AfterStep(Job& job, bool fed_input) {
  if (fed_input) {
    job.consumed += job.chunk;
    const int64_t total = static_cast<int64_t>(job.spec.input.size());
    if (job.spec.callbacks.on_progress) {
      job.spec.callbacks.on_progress(job.consumed, total);
    }
    if (job.consumed < total) return;
    job.result.input_seconds = Seconds(job.first_step, Clock::now());
    if (!job.spec.generate) {
      job.phase = Job::Phase::kIndexing;  // finishes once clustered
      if (job.store().IndexReady()) Finish(job, absl::OkStatus());
      return;
    }
    job.phase = Job::Phase::kGenerating;
    if (job.spec.sampling.max_tokens == 0) {
      EndGeneration(job, FinishReason::kLength, /*last_token=*/-1);
      return;
    }
  } else if (job.keep_partial) {
    Finish(job, absl::CancelledError("cancelled"));  // streamed tokens kept
    return;
  } else if (job.append_last) {
    Finish(job, absl::OkStatus());  // the last streamed token is stored
    return;
  }
  EmitToken(job);
}

bool EngineLoop::KeepsPartial(const Job& job) const {
  return job.spec.keep_partial_on_cancel &&
         job.phase == Job::Phase::kGenerating &&
         job.result.generated_tokens > 0 && !job.keep_partial;
}

// Samples from the job's logits and streams the token.
void EngineLoop::EmitToken(Job& job) {
  TokenLogprobs logprobs;
  const bool want_logprobs = job.spec.sampling.logprobs >= 0;
  const int32_t token =
      job.sampler->Sample(job.logits, want_logprobs ? &logprobs : nullptr);
  const auto now = Clock::now();
  if (job.first_token == Clock::time_point{}) {
    job.first_token = now;
    job.result.time_to_first_token_seconds = Seconds(job.submitted, now);
  }
  job.last_token = now;
  if (!job.spec.sampling.ignore_eos &&
      model_.tokenizer->IsEndOfGeneration(token)) {
    // Not streamed, not counted, not appended.
    EndGeneration(job, FinishReason::kEos, /*last_token=*/-1);
    return;
  }
  ++job.result.generated_tokens;
  job.generated.push_back(token);
  job.sampler->Accept(token);
  bool stopped = false;
  const std::string text = job.stops->Push(job.detok->Push(token), &stopped);
  job.result.text += text;
  if (job.spec.callbacks.on_token) {
    job.spec.callbacks.on_token(token, text,
                                want_logprobs ? &logprobs : nullptr);
  }
  if (stopped) {
    EndGeneration(job, FinishReason::kStop, token);
  } else if (job.result.generated_tokens >= job.spec.sampling.max_tokens) {
    EndGeneration(job, FinishReason::kLength, token);
  } else {
    job.next_token = token;
  }
}

void EngineLoop::EndGeneration(Job& job, FinishReason reason,
                               int32_t last_token) {
  job.result.finish = reason;
  if (reason != FinishReason::kStop) {
    bool stopped = false;
    std::string rest = job.stops->Push(job.detok->Flush(), &stopped);
    if (!stopped) rest += job.stops->Flush();
    if (!rest.empty()) {
      job.result.text += rest;
      if (job.spec.callbacks.on_token) {
        job.spec.callbacks.on_token(-1, rest, nullptr);
      }
    }
  }
  if (job.result.generated_tokens > 1) {
    job.result.decode_seconds = Seconds(job.first_token, job.last_token);
  }
  if (last_token < 0) {
    Finish(job, absl::OkStatus());
    return;
  }
  // One more step stores the token (and the logits after it, from which a
  // later call continues); AfterStep then finishes the job.
  job.next_token = last_token;
  job.append_last = true;
}

// Ends the job: restores the checkpoint unless it succeeded, publishes the
// session's stats, releases the session, then reports.
void EngineLoop::Finish(Job& job, absl::Status status) {
  if (job.phase == Job::Phase::kDone) return;
  job.phase = Job::Phase::kDone;
  Session* session = job.spec.lease.get();
  const bool keep =
      status.ok() || (job.keep_partial && absl::IsCancelled(status));
  if (!keep && job.checkpoint != nullptr) {
    session->set_store(std::move(job.checkpoint));
    session->set_last_logits(std::move(job.checkpoint_logits));
  } else if (keep) {
    session->set_last_logits(std::move(job.logits));
    session->AppendRecentTokens(job.spec.input);
    session->AppendRecentTokens(job.generated);
  }
  job.checkpoint.reset();
  if (status.ok() && job.spec.kind == AppendKind::kPrompt) {
    const auto& segs = session->store().segments();
    if (!segs.empty() && segs.back()->first_pos() + segs.back()->size() ==
                             session->store().num_tokens()) {
      job.result.clusters_built =
          session->store().SegmentClusters(segs.size() - 1);
    }
  }
  job.result.status = status;
  job.result.session_tokens = session->store().num_tokens();
  session->PublishStats();
  JobCallbacks callbacks = std::move(job.spec.callbacks);
  if (callbacks.before_release) callbacks.before_release(job.result, *session);
  job.spec.lease = SessionLease();  // release before reporting
  if (callbacks.on_done) callbacks.on_done(job.result);
}

}  // namespace ckv::server
