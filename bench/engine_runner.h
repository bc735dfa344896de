// Timed prefill and decode runs of the CPU transformer for one thread count.
//
// Method: one DenseKvCache is filled to increasing depths D (random valid
// token ids; the transformer chunks long inputs). The tokens from the
// previous depth up to D are one timed prefill ("prefill at depth"); then
// `decode_tokens` single tokens are decoded greedily at depth D, each timed.
// Separately, a `pp_tokens` prefill is timed from an empty cache and, on a
// copy of the cache, at each depth of `pp_depths` that is also in `depths`.
// Everything is warmed up once first; caches are grown before timing.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/engine_options.h"
#include "bench/step_stats.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model.h"

namespace ckv::bench {

struct PrefillResult {
  int64_t from = 0;  // cache depth before the prefill
  int64_t tokens = 0;
  double seconds = 0;

  double TokensPerSecond() const {
    return tokens > 0 && seconds > 0 ? tokens / seconds : 0.0;
  }
};

struct DecodeResult {
  int64_t depth = 0;  // cache depth before the first step
  std::vector<double> step_seconds;
  // The 1-thread read-bandwidth probe taken just before the steps: the
  // floor of these steps is computed against it, so that a shared
  // machine's drift between measurements does not move their ratio.
  double probe_bytes_per_second = 0;
  // Time the process's threads waited runnable for a CPU during the steps
  // (/proc/self/task/*/schedstat), summed over threads.
  double run_delay_seconds = 0;
  // The thread pool's counters over the steps (kernels/cpu/thread_pool.h).
  kernels::cpu::ThreadPoolStats pool;

  double MedianSeconds() const;
  double MeanSeconds() const;
  StepStats Stats() const { return ComputeStepStats(step_seconds); }
};

struct DepthResult {
  int64_t depth = 0;      // requested depth
  PrefillResult prefill;  // segment from the previous depth; may be empty
  DecodeResult decode;    // decode.depth is the actual depth
};

struct ThreadRun {
  int threads = 0;
  std::vector<PrefillResult> pp;  // from empty first, then at pp_depths
  std::vector<DepthResult> depths;
  // Totals over all timed steps: wall time and process CPU time. Their
  // ratio per thread tells whether the run had its cores (a noise check on
  // shared machines).
  double wall_seconds = 0;
  double cpu_seconds = 0;

  double CpuShare() const {
    return wall_seconds > 0 ? cpu_seconds / (wall_seconds * threads) : 0.0;
  }
};

// Runs the whole method for `threads` threads; progress goes to stderr.
absl::StatusOr<ThreadRun> RunThreadCount(const Model& model,
                                         const EngineBenchOptions& options,
                                         int threads);

}  // namespace ckv::bench
