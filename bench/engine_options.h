// Typed options of engine_bench. The defaults live here only: the command-line
// flags (engine_options.cc) take their defaults from this struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/background_load.h"
#include "bench/bench_common.h"
#include "kernels/dtype.h"
#include "model/backend/backend.h"
#include "model/make_random.h"

namespace ckv::bench {

struct EngineBenchOptions {
  std::string model;  // GGUF path; empty: a random model cached in work_dir
  std::string work_dir = "bench/results";
  RandomModelSpec random = DefaultModelSpec();  // used when `model` is empty
  std::vector<int64_t> depths = {0, 4096, 16384, 32768};  // ascending
  std::vector<int> threads = {1, 2};
  // Compute backend (model/backend/backend.h): auto|cpu|fake (the device
  // backend on the fake device: a test instrument, not a speed); cuda is
  // refused until built.
  BackendKind backend = BackendKind::kAuto;
  int decode_tokens = 32;
  int prefill_chunk = 256;
  kernels::DType kv_type = kernels::DType::kF16;
  std::string out_json;  // empty: no JSON
  bool quick = false;
  // Fixed-size prefill ("pp512"), from an empty cache and at each of
  // pp_depths that is also in `depths`.
  int pp_tokens = 512;
  std::vector<int64_t> pp_depths = {8192};
  int64_t bandwidth_bytes = int64_t{256} << 20;  // read-bandwidth probe
  int bandwidth_repeats = 3;
  uint64_t seed = 1;  // random token ids
  // CPU kernel set (kernels::cpu::SelectKernels): auto|scalar|avx2|avx512|avx512_bf16.
  std::string kernels = "auto";
  // Controlled load beside the timed runs (--background-load F): a process
  // busy F of one core (background_load.h); fraction 0: none.
  BackgroundLoadOptions background;
  // ThreadPool schedule (kernels/cpu/thread_pool.h): dynamic|static.
  std::string pool_schedule = "dynamic";

  int64_t max_depth() const { return depths.empty() ? 0 : depths.back(); }
};

// Reads the flags (after absl::ParseCommandLine) into options, applying the
// --quick preset where the corresponding flags were not given. Invalid values
// are INVALID_ARGUMENT.
absl::StatusOr<EngineBenchOptions> EngineBenchOptionsFromFlags();

}  // namespace ckv::bench
