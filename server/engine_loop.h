// The scheduler: one engine thread runs every model step. Each step batches
// one token of every generating job with input chunks (prefills, appended
// questions) sized by server/input_budget.h, so weights are read once per
// step for the whole batch and a long prefill delays other sessions' tokens
// by at most one chunk, which takes its share of the engine's time while
// sessions decode. Attention runs per session with its own policy.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "model/generation.h"
#include "model/model.h"
#include "model/transformer.h"
#include "server/input_budget.h"
#include "server/recall_sampler.h"
#include "server/session.h"

namespace ckv::server {

// What a job reports when it ends (exactly once).
struct JobResult {
  absl::Status status;  // OK, CANCELLED, or an engine error
  FinishReason finish = FinishReason::kLength;
  int64_t input_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t session_tokens = 0;  // afterwards; every streamed token included
  int clusters_built = 0;      // by a prompt job's segment (all KV heads of
                               // the first sparse layer)
  double queue_seconds = 0.0;  // submitted -> first step
  double input_seconds = 0.0;  // first step -> input consumed
  double time_to_first_token_seconds = 0.0;  // submitted -> first token
  double decode_seconds = 0.0;               // first -> last token
  std::string text;                          // all generated text
};

// Callbacks run on the engine thread and must not block.
struct JobCallbacks {
  std::function<void(int64_t done, int64_t total)> on_progress;
  // A generated token and the text it completes (possibly empty). Token -1:
  // text held back until the end (incomplete UTF-8 or a partial stop-string
  // match), released with no new token. End-of-generation tokens are not
  // reported. `logprobs`: when sampling.logprobs >= 0 and token >= 0, else
  // null.
  std::function<void(int32_t token, absl::string_view text,
                     const TokenLogprobs* logprobs)>
      on_token;
  std::function<void(const JobResult&)> on_done;
  // Optional: runs just before the session is released, with the result
  // on_done will get (e.g. to record the conversation on the session).
  std::function<void(const JobResult&, Session&)> before_release;
};

struct JobSpec {
  SessionLease lease;          // the session, held for the whole job
  std::vector<int32_t> input;  // appended first (may be empty for decode)
  AppendKind kind = AppendKind::kGenerated;  // kPrompt for Prefill
  bool generate = false;                     // decode after the input
  SamplingParams sampling;                   // validated
  JobCallbacks callbacks;
  // On cancellation after at least one generated token: keep the input and
  // the generated tokens in the session (the job still ends CANCELLED).
  bool keep_partial_on_cancel = false;
};

// Handle to a submitted job.
class JobHandle {
 public:
  // Requests cancellation: the job ends with CANCELLED at the next step and
  // its session is restored to its state before the job (unless
  // JobSpec::keep_partial_on_cancel applies: then the step stores the last
  // generated token and the job ends CANCELLED keeping what it appended).
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::atomic<bool> cancelled_{false};
};

struct EngineStats {
  int64_t steps = 0;
  int64_t batched_tokens = 0;  // input and decoded tokens of every step
  int64_t decoded_tokens = 0;  // of which single-token decode steps
  int queued = 0;              // submitted, not yet taken by the engine
  int active = 0;              // taken by the engine, not finished
  int waiting_input = 0;  // of the active: input (prefill) not fully fed yet
};

class EngineLoop {
 public:
  // Runs the model on a CpuBackend of options.threads threads.
  EngineLoop(const Model& model, const TransformerOptions& options,
             int max_queued);
  // Runs the model on `backend` (not null). `prefill_share`: the engine
  // time input gets while sessions decode (InputShareOptions::share; 0:
  // fair, 1: fixed prefill_chunk steps).
  EngineLoop(const Model& model, const TransformerOptions& options,
             int max_queued, std::unique_ptr<Backend> backend,
             double prefill_share = 0.0);
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;
  ~EngineLoop();  // cancels remaining jobs, joins the thread

  // Queues a job. RESOURCE_EXHAUSTED when max_queued jobs are waiting;
  // UNAVAILABLE after Shutdown. On error the callbacks are not called.
  absl::StatusOr<std::shared_ptr<JobHandle>> Submit(JobSpec spec);

  // Stops accepting jobs; running ones continue. WaitIdle blocks until no job
  // remains or the deadline passes (returns whether idle).
  void StopAccepting();
  bool WaitIdle(absl::Duration timeout);
  // Cancels every queued and running job.
  void CancelAll();

  EngineStats stats() const;
  // OK, or the backend's sticky failure (a device error): every step fails
  // with it from then on, so the server reports itself unhealthy. Any
  // thread.
  absl::Status backend_failure() const;
  // Called once, on the engine thread, when the backend first fails (set
  // before the first Submit; it must not block or call into the engine).
  void SetBackendFailureListener(std::function<void(const absl::Status&)> fn);
  const Model& model() const { return model_; }
  // The backend the model runs on (GetServerInfo, the status page).
  const BackendInfo& backend_info() const { return backend_info_; }
  // Its device's segment residency (the metrics). Any thread.
  Backend::Residency residency() const {
    return transformer_.backend().residency();
  }
  // Live recall telemetry (server/recall_sampler.h); set before the first
  // Submit. Null: off.
  void SetRecallSampler(std::unique_ptr<RecallSampler> sampler);

 private:
  struct Job;
  // The rows of one model step and the job of each (decode rows first).
  struct StepBatch {
    std::vector<SequenceInput> inputs;
    std::vector<Job*> owners;
    size_t n_decode = 0;       // inputs[0, n_decode): one decoded token each
    int64_t input_tokens = 0;  // tokens of the input chunks after them
  };
  void Loop();
  // Runs one batched model step; false when there was nothing to run.
  bool RunStep();
  void AdvanceJobs();                 // cancel, start, finish indexed jobs
  void BuildBatch(StepBatch* batch);  // the scheduler's batching
  void AddInputChunks(StepBatch* batch);
  absl::Status RunModel(StepBatch& batch);  // the backend step
  void DropFinished();  // removes jobs that reported on_done
  absl::Status StartJob(Job& job);
  void AfterStep(Job& job, bool fed_input);
  void EmitToken(Job& job);
  // Whether a cancelled job keeps its tokens (keep_partial_on_cancel).
  bool KeepsPartial(const Job& job) const;
  void Finish(Job& job, absl::Status status);
  // Ends generation: releases held-back text, then finishes the job, or,
  // when `last_token` >= 0 (a streamed token not yet in the session), lets
  // the next step append it first, so that every streamed token is in the
  // session when the job reports.
  void EndGeneration(Job& job, FinishReason reason, int32_t last_token);

  const Model& model_;
  Transformer transformer_;
  const BackendInfo backend_info_;
  InputBudget input_budget_;  // engine thread only
  const int max_queued_;
  // std::mutex (not absl::Mutex): ThreadSanitizer sees its ordering.
  mutable std::mutex mu_;
  std::condition_variable cv_;  // queue, stop and idleness changes
  // Guarded by mu_.
  std::deque<std::unique_ptr<Job>> queue_;
  bool accepting_ = true;
  bool stop_ = false;
  bool cancel_all_ = false;
  int active_count_ = 0;
  EngineStats stats_;
  absl::Status backend_failure_;
  std::function<void(const absl::Status&)> on_backend_failure_;  // set once
  std::vector<std::unique_ptr<Job>> active_;  // engine thread only
  std::unique_ptr<RecallSampler> recall_;     // set before the first Submit
  std::thread thread_;
};

}  // namespace ckv::server
