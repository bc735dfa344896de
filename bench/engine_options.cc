#include "bench/engine_options.h"

#include <algorithm>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_common.h"
#include "kernels/cpu/ops.h"

namespace ckv::bench {

namespace {

const EngineBenchOptions& Defaults() {
  static const EngineBenchOptions* const kDefaults = new EngineBenchOptions;
  return *kDefaults;
}

// Settings --quick replaces unless the corresponding flag is changed.
constexpr int64_t kQuickDepths[] = {0, 128};
constexpr int kQuickDecodeTokens = 8;

}  // namespace
}  // namespace ckv::bench

using ckv::bench::Defaults;

ABSL_FLAG(std::string, model, "",
          "GGUF model; empty: a random model of the default shape, written "
          "once into --work_dir");
ABSL_FLAG(std::string, work_dir, Defaults().work_dir,
          "where the random model is cached");
ABSL_FLAG(std::string, vocab, Defaults().random.vocab,
          "vocabulary of the random model: a GGUF path or 'byte'");
ABSL_FLAG(std::string, depths, absl::StrJoin(Defaults().depths, ","),
          "ascending context depths at which to measure prefill and decode");
ABSL_FLAG(std::string, threads, absl::StrJoin(Defaults().threads, ","),
          "thread counts to measure");
ABSL_FLAG(int, decode_tokens, Defaults().decode_tokens,
          "decode steps timed at each depth");
ABSL_FLAG(int, prefill_chunk, Defaults().prefill_chunk,
          "max tokens per forward step during prefill");
ABSL_FLAG(std::string, kv_type, "f16", "KV cache type: f32|f16|bf16");
ABSL_FLAG(std::string, out_json, "", "write all results to this JSON file");
ABSL_FLAG(bool, quick, false,
          "smoke test: tiny model (d 64, byte vocab), depths 0,128, 8 decode "
          "steps");
ABSL_FLAG(int, pp_tokens, Defaults().pp_tokens,
          "tokens of the fixed-size prefill (pp512)");
ABSL_FLAG(int64_t, bandwidth_mb, Defaults().bandwidth_bytes >> 20,
          "buffer size of the memory read-bandwidth probe (MiB, >= 256)");
ABSL_FLAG(uint64_t, seed, Defaults().seed, "seed of the random token ids");
ABSL_FLAG(std::string, dtype, "f16",
          "weight type of the random model: f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|"
          "... (every GGUF block type the engine reads) or q4_k_m|q5_k_m");
ABSL_FLAG(std::string, kernels, Defaults().kernels,
          "CPU kernels: auto|scalar|avx2|avx512|avx512_bf16 (scalar: the "
          "reference path)");

ABSL_FLAG(double, background_load, Defaults().background.fraction,
          "run a second process busy this fraction of one core (0..1, duty "
          "cycle of --background_period_ms) during the whole benchmark: the "
          "contention rows; 0: none");
ABSL_FLAG(double, background_period_ms, Defaults().background.period_ms,
          "duty-cycle period of --background_load (ms)");

ABSL_FLAG(std::string, backend, ckv::BackendKindName(Defaults().backend),
          "compute backend: auto|cpu|cuda|fake (auto: the best this build "
          "has; fake: the fake device, for tests; cuda is not built yet)");
ABSL_FLAG(std::string, pool_schedule, Defaults().pool_schedule,
          "thread pool schedule: dynamic (chunks claimed one at a time) or "
          "static (one fixed range per thread; the former policy)");

namespace ckv::bench {
namespace {

absl::StatusOr<kernels::DType> ParseKvType(const std::string& s) {
  if (s == "f32") return kernels::DType::kF32;
  if (s == "f16") return kernels::DType::kF16;
  if (s == "bf16") return kernels::DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--kv_type: unknown type '", s, "'"));
}

void ApplyQuickPreset(EngineBenchOptions& o) {
  o.random = QuickModelSpec();
  if (!Changed(FLAGS_depths)) {
    o.depths.assign(std::begin(kQuickDepths), std::end(kQuickDepths));
  }
  if (!Changed(FLAGS_decode_tokens)) o.decode_tokens = kQuickDecodeTokens;
}

absl::Status ReadLists(EngineBenchOptions& o) {
  auto depths = ParseList<int64_t>("depths", absl::GetFlag(FLAGS_depths), 0);
  if (!depths.ok()) return depths.status();
  o.depths = *std::move(depths);
  if (!std::is_sorted(o.depths.begin(), o.depths.end()) ||
      std::adjacent_find(o.depths.begin(), o.depths.end()) != o.depths.end()) {
    return absl::InvalidArgumentError("--depths must be strictly ascending");
  }
  auto threads = ParseList<int>("threads", absl::GetFlag(FLAGS_threads), 1);
  if (!threads.ok()) return threads.status();
  o.threads = *std::move(threads);
  return absl::OkStatus();
}

absl::Status ReadScalars(EngineBenchOptions& o) {
  auto backend = ParseBackendFlag(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  o.model = absl::GetFlag(FLAGS_model);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.random.vocab = absl::GetFlag(FLAGS_vocab);
  o.out_json = absl::GetFlag(FLAGS_out_json);
  o.decode_tokens = absl::GetFlag(FLAGS_decode_tokens);
  o.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  o.pp_tokens = absl::GetFlag(FLAGS_pp_tokens);
  o.bandwidth_bytes = absl::GetFlag(FLAGS_bandwidth_mb) << 20;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.background.fraction = absl::GetFlag(FLAGS_background_load);
  o.background.period_ms = absl::GetFlag(FLAGS_background_period_ms);
  if (!(o.background.fraction >= 0 && o.background.fraction <= 1) ||
      !(o.background.period_ms > 0)) {
    return absl::InvalidArgumentError(
        "--background_load must be in [0, 1] and --background_period_ms > 0");
  }
  if (o.decode_tokens < 1 || o.prefill_chunk < 1 || o.pp_tokens < 1) {
    return absl::InvalidArgumentError(
        "--decode_tokens, --prefill_chunk and --pp_tokens must be >= 1");
  }
  if (o.bandwidth_bytes < (int64_t{256} << 20)) {
    return absl::InvalidArgumentError("--bandwidth_mb must be >= 256");
  }
  auto kv = ParseKvType(absl::GetFlag(FLAGS_kv_type));
  if (!kv.ok()) return kv.status();
  o.kv_type = *kv;
  o.pool_schedule = absl::GetFlag(FLAGS_pool_schedule);
  if (o.pool_schedule != "dynamic" && o.pool_schedule != "static") {
    return absl::InvalidArgumentError(
        "--pool_schedule must be dynamic or static");
  }
  o.kernels = absl::GetFlag(FLAGS_kernels);
  if (!kernels::cpu::IsKernelSetName(o.kernels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernels must be one of ", kernels::cpu::kKernelSetNames));
  }
  return absl::OkStatus();
}

// The random model's weight type; applied after the --quick preset.
absl::Status ReadWeightType(EngineBenchOptions& o) {
  if (!ParseRandomDType(absl::GetFlag(FLAGS_dtype), &o.random)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype: unknown type '", absl::GetFlag(FLAGS_dtype), "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EngineBenchOptions> EngineBenchOptionsFromFlags() {
  EngineBenchOptions o;
  if (auto s = ReadScalars(o); !s.ok()) return s;
  if (auto s = ReadLists(o); !s.ok()) return s;
  o.quick = absl::GetFlag(FLAGS_quick);
  if (o.quick) {
    const std::string vocab = o.random.vocab;
    ApplyQuickPreset(o);
    if (Changed(FLAGS_vocab)) o.random.vocab = vocab;
  }
  if (auto s = ReadWeightType(o); !s.ok()) return s;
  return o;
}

}  // namespace ckv::bench
