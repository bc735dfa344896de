// The workload of service_bench and what one run of it records. A run: N
// sessions are created and prefilled concurrently (untimed for the
// comparison), then every session gets one Decode (question tokens, then
// greedy generation) at the same moment; every generated token is
// timestamped where its receiver sees it (the gRPC client thread, or the
// engine's on_token callback in-process).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/service_options.h"
#include "model/model.h"
#include "model/sampler.h"
#include "server/server_config.h"

namespace ckv::bench {

using Clock = std::chrono::steady_clock;

// Inputs of one run; session i gets prompts[i] and questions[i].
struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> questions;
  SamplingParams sampling;  // greedy, max_tokens = decode_tokens
  KvStoreConfig kv;         // server defaults with policy and budget set

  int sessions() const { return static_cast<int>(prompts.size()); }
};

// Random ids of ordinary tokens (no control or end-of-generation token),
// the same for a given seed, session count and options.
Workload MakeWorkload(const ServiceBenchOptions& o, const Model& model,
                      int sessions, int decode_tokens);

// What one session's Decode produced.
struct SessionTrace {
  Clock::time_point request;              // Decode call / Submit
  std::vector<Clock::time_point> tokens;  // arrival of every token (id >= 0)
  std::vector<int32_t> ids;
  std::string finish;  // "length", "eos", "stop"
  absl::Status status;
};

// Process resource usage (all threads).
struct Usage {
  double cpu_seconds = 0.0;  // user + system
  int64_t voluntary_switches = 0;
  int64_t involuntary_switches = 0;
};
Usage ProcessUsage();
Usage operator-(const Usage& a, const Usage& b);

// Everything a run records before it is summarised.
struct RawRun {
  Clock::time_point prefill_start, prefill_end;
  Clock::time_point decode_start;  // every Decode released at once
  Usage decode_usage;              // process usage over the decode phase
  std::vector<SessionTrace> traces;
};

// One (mode, sessions, round) measurement.
struct RunSample {
  std::string mode;  // "grpc" or "inprocess"
  int sessions = 0;
  int round = 0;
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0.0;
  int64_t generated_tokens = 0;
  double decode_seconds = 0.0;  // decode start -> last token of any session
  double tokens_per_second = 0.0;
  double ttft_p50_ms = 0.0, ttft_p99_ms = 0.0;  // Decode request -> 1st token
  double itl_p50_ms = 0.0, itl_p99_ms = 0.0;    // all sessions' gaps pooled
  double itl_p90_ms = 0.0, itl_max_ms = 0.0;
  double itl_mean_ms = 0.0;
  int eos_sessions = 0;  // sessions that ended early on end-of-generation
  Usage usage;           // decode phase
  std::vector<int32_t> first_session_ids;  // for the cross-mode check
};

// A way to serve the workload: gRPC over loopback or in-process.
class ServiceMode {
 public:
  virtual ~ServiceMode() = default;
  virtual const char* name() const = 0;
  // Creates and prefills the sessions, releases every Decode at once, waits
  // for all of them and closes the sessions.
  virtual absl::StatusOr<RawRun> Run(const Workload& w) = 0;
};

// The configuration both modes share: the server's defaults with the bench's
// engine threads (0 resolved to all cores), prefill chunk, KV defaults and
// enough sessions; listening on 127.0.0.1:0 without a /metrics endpoint.
server::ServerConfig BenchServerConfig(const ServiceBenchOptions& o,
                                       const std::string& model_path);

// Percentile p (0..100) with linear interpolation; 0 for no values.
double Percentile(std::vector<double> values, double p);

// Summarises a run; an error when any session failed.
absl::StatusOr<RunSample> Summarize(const RawRun& run, int64_t prompt_tokens);

}  // namespace ckv::bench
