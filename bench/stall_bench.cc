// stall_bench: does heavy work of other calls stall a decoding session?
// One session decodes over gRPC while, on the same server, a session of
// --context tokens is snapshotted to disk (SnapshotSession waits for its
// clustering and writes the file) and a text of about --context tokens is
// prefilled into a third session (the server tokenizes it). The decoding
// session's inter-token gaps are recorded alone (baseline) and during that
// work; the figure of merit is the largest gap during the work counted in
// engine steps (the server's step counter read as each token arrives; each
// step batches one decode token with at most one --prefill-chunk of input,
// so a session that is never stalled sees 1).
// Writes JSON (and plot_stall.py draws it); no timing is asserted.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "bench/stall_run.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "nlohmann/json.hpp"
#include "server/input_budget.h"

ABSL_FLAG(std::string, model, "",
          "GGUF model; empty: a random model of the default shape, written "
          "once into --work_dir");
ABSL_FLAG(std::string, work_dir, "bench/results",
          "random model cache and the server's snapshot directory");
ABSL_FLAG(int, context, 32768,
          "tokens of the snapshotted session and of the prefilled text");
ABSL_FLAG(int, prefill_chunk, 256, "max input tokens per engine step");
ABSL_FLAG(double, prefill_share, 0.0,
          "the server's --prefill-share (0: fair, 1: fixed chunks)");
ABSL_FLAG(int, threads, 0, "engine threads (0: all cores)");
ABSL_FLAG(int, baseline_tokens, 64, "tokens decoded alone first");
ABSL_FLAG(std::string, out_json, "", "write the results to this JSON file");
ABSL_FLAG(bool, quick, false,
          "smoke test: tiny model (d 64, byte vocab), --context 2048");

namespace ckv::bench {
namespace {

absl::StatusOr<StallOptions> OptionsFromFlags() {
  StallOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.context = absl::GetFlag(FLAGS_context);
  o.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  o.prefill_share = absl::GetFlag(FLAGS_prefill_share);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.baseline_tokens = absl::GetFlag(FLAGS_baseline_tokens);
  o.out_json = absl::GetFlag(FLAGS_out_json);
  o.random = DefaultModelSpec();
  if (absl::GetFlag(FLAGS_quick)) {
    o.random = QuickModelSpec();
    if (!Changed(FLAGS_context)) o.context = 2048;
    if (!Changed(FLAGS_baseline_tokens)) o.baseline_tokens = 16;
  }
  if (o.context < 16 || o.prefill_chunk < 1 || o.threads < 0 ||
      o.baseline_tokens < 4 || !server::IsPrefillShare(o.prefill_share)) {
    return absl::InvalidArgumentError(
        "--context >= 16, --prefill_chunk >= 1, --threads >= 0, "
        "--baseline_tokens >= 4, --prefill_share in [0, 1]");
  }
  return o;
}

nlohmann::json GapJson(const GapStats& g) {
  return {{"tokens", g.tokens},
          {"mean_ms", g.mean_ms},
          {"max_engine_steps", g.max_steps},
          {"p50_ms", g.p50_ms},
          {"p99_ms", g.p99_ms},
          {"max_ms", g.max_ms}};
}

nlohmann::json ReportJson(const StallOptions& o, const StallResult& r) {
  nlohmann::json j;
  j["bench"] = "stall";
  j["time"] = UtcTimestamp();
  j["backend"] = "cpu";
  j["kernels"] = kernels::cpu::KernelSetName();
  j["cpu"] = kernels::cpu::DescribeCpuFeatures();
  j["engine_threads"] = r.engine_threads;
  j["model"] = r.model_path;
  j["context"] = o.context;
  j["prefill_chunk"] = o.prefill_chunk;
  j["prefill_share"] = o.prefill_share;
  j["mean_gap_over_alone"] = r.mean_gap_over_alone();
  j["baseline"] = GapJson(r.baseline);
  j["during_work"] = GapJson(r.loaded);
  j["max_gap_in_steps"] = r.max_gap_in_steps();
  j["max_gap_over_median_gap"] = r.max_gap_over_median();
  j["target_max_gap_in_steps"] = kTargetMaxGapInSteps;
  j["snapshot"] = {{"start_s", r.snapshot.start_s},
                   {"end_s", r.snapshot.end_s},
                   {"session_tokens", r.snapshot_tokens},
                   {"bytes", r.snapshot_bytes}};
  j["prefill"] = {{"start_s", r.prefill.start_s},
                  {"end_s", r.prefill.end_s},
                  {"text_bytes", r.prefill_text_bytes},
                  {"tokens", r.prefill_tokens}};
  j["token_times_s"] = r.token_times_s;
  return j;
}

void PrintReport(const StallOptions& o, const StallResult& r) {
  std::printf(
      "stall_bench: kernels %s, %d engine threads, context %d, chunk %d, "
      "prefill share %g\n"
      "  alone:        gap mean %.2f ms, p50 %.2f ms, max %.2f ms (%d tokens)\n"
      "  during work:  gap mean %.2f ms, p50 %.2f ms, p99 %.2f ms, max %.2f "
      "ms (%d tokens); mean %.2f x alone\n"
      "  snapshot of %lld tokens (%lld bytes): %.2f s; prefill of %lld "
      "tokens: %.2f s\n"
      "  largest gap: %.0f engine steps (target <= %.0f); %.2f x the median "
      "gap\n",
      kernels::cpu::KernelSetName(), r.engine_threads, o.context,
      o.prefill_chunk, o.prefill_share, r.baseline.mean_ms, r.baseline.p50_ms,
      r.baseline.max_ms, r.baseline.tokens, r.loaded.mean_ms, r.loaded.p50_ms,
      r.loaded.p99_ms, r.loaded.max_ms, r.loaded.tokens,
      r.mean_gap_over_alone(), static_cast<long long>(r.snapshot_tokens),
      static_cast<long long>(r.snapshot_bytes),
      r.snapshot.end_s - r.snapshot.start_s,
      static_cast<long long>(r.prefill_tokens),
      r.prefill.end_s - r.prefill.start_s, r.max_gap_in_steps(),
      kTargetMaxGapInSteps, r.max_gap_over_median());
}

absl::Status Run(const StallOptions& o) {
  auto path = o.model.empty()
                  ? EnsureRandomModel(o.random, o.work_dir, "stall_bench")
                  : absl::StatusOr<std::string>(o.model);
  if (!path.ok()) return path.status();
  auto r = RunStall(o, *path);
  if (!r.ok()) return r.status();
  PrintReport(o, *r);
  if (o.out_json.empty()) return absl::OkStatus();
  return WriteTextFile(o.out_json, ReportJson(o, *r).dump(1) + "\n");
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "Does heavy work of other calls stall a decoding session? One session "
      "decodes while a --context-token session is snapshotted and a "
      "--context-token text is prefilled.\n  stall_bench [--model M.gguf] "
      "[--context 32768] [--prefill-chunk 256] [--out-json F] [--quick]",
      &ckv::bench::OptionsFromFlags, &ckv::bench::Run);
}
