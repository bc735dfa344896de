// The measured run of stall_bench (bench/stall_bench.cc): a ClusterKvServer
// in this process on 127.0.0.1:0 and the gRPC calls that load it, each on
// its own channel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/make_random.h"

namespace ckv::bench {

struct StallOptions {
  std::string model;  // GGUF path; empty: a random model cached in work_dir
  std::string work_dir = "bench/results";
  RandomModelSpec random;  // used when `model` is empty
  int context = 32768;     // tokens of the snapshotted session and the text
  int prefill_chunk = 256;
  double prefill_share = 0.0;  // --prefill-share (0: fair)
  int threads = 0;             // engine threads; 0: all cores
  int baseline_tokens = 64;
  std::string out_json;
};

// The bound on the decoding session's longest gap, in engine steps.
inline constexpr double kTargetMaxGapInSteps = 2.0;

// Inter-token gaps of the decoding session (the first token's wait is not a
// gap).
struct GapStats {
  int tokens = 0;
  double mean_ms = 0.0;
  double p50_ms = 0.0;
  double p99_ms = 0.0;
  double max_ms = 0.0;
  // Engine steps run between two tokens of the session, at most: 1 when
  // the session got a token in every step (the engine's step counter is
  // read as each token arrives, so a step may be counted late: ±1).
  int64_t max_steps = 0;
};

// Seconds since the loaded Decode call started.
struct Interval {
  double start_s = 0.0;
  double end_s = 0.0;
};

struct StallResult {
  std::string model_path;
  int engine_threads = 0;
  GapStats baseline;  // decoding alone
  GapStats loaded;    // tokens that arrived while the work ran
  Interval snapshot;
  Interval prefill;
  int64_t snapshot_tokens = 0;
  int64_t snapshot_bytes = 0;
  int64_t prefill_text_bytes = 0;
  int64_t prefill_tokens = 0;
  std::vector<double> token_times_s;  // every token of the loaded Decode

  // The mean gap during the work over the mean gap alone: what the work
  // costs the decoding session (its share of the engine: 2 when it shares
  // fairly with one prefill).
  double mean_gap_over_alone() const {
    return baseline.mean_ms > 0 ? loaded.mean_ms / baseline.mean_ms : 0.0;
  }
  // The longest gap during the work in engine steps.
  double max_gap_in_steps() const {
    return static_cast<double>(loaded.max_steps);
  }
  // The longest gap during the work in units of its median gap (steps with
  // and without a prefill chunk differ a lot: not a step count).
  double max_gap_over_median() const {
    return loaded.p50_ms > 0 ? loaded.max_ms / loaded.p50_ms : 0.0;
  }
};

absl::StatusOr<StallResult> RunStall(const StallOptions& o,
                                     const std::string& model_path);

}  // namespace ckv::bench
