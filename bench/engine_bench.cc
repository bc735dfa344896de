// engine_bench: CPU prefill and decode throughput of the engine at several
// context depths and thread counts, against a memory-bandwidth floor measured
// in the same run. See engine_runner.h for the method; scripts/bench.sh runs
// it with the default settings and plots the result (plot_engine.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/background_load.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "bench/engine_options.h"
#include "bench/engine_report.h"
#include "bench/engine_runner.h"
#include "bench/mem_bandwidth.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model.h"

namespace ckv::bench {
namespace {

absl::Status WriteJson(const BenchReport& report, const std::string& path) {
  const absl::Status s = WriteTextFile(path, ReportJson(report).dump(2) + "\n");
  if (!s.ok()) return s;
  std::fprintf(stderr, "engine_bench: wrote %s\n", path.c_str());
  return absl::OkStatus();
}

absl::Status Run(const EngineBenchOptions& o) {
  if (!kernels::cpu::SelectKernels(o.kernels.c_str())) {
    return absl::InvalidArgumentError(
        absl::StrCat("this CPU or build cannot run --kernels ", o.kernels));
  }
  kernels::cpu::SetDefaultPoolSchedule(
      o.pool_schedule == "static" ? kernels::cpu::PoolSchedule::kStatic
                                  : kernels::cpu::PoolSchedule::kDynamic);
  BenchReport report;
  report.options = &o;
  report.random_model = o.model.empty();
  auto path = report.random_model
                  ? EnsureRandomModel(o.random, o.work_dir, "engine_bench")
                  : absl::StatusOr<std::string>(o.model);
  if (!path.ok()) return path.status();
  report.model_path = *path;
  auto model = LoadModel(*path);
  if (!model.ok()) return model.status();
  report.model = model->get();
  std::fprintf(stderr, "engine_bench: memory bandwidth probe\n");
  report.bandwidth =
      MeasureReadBandwidth(o.bandwidth_bytes, o.bandwidth_repeats);
  auto load = BackgroundLoad::Start(o.background);
  if (!load.ok()) return load.status();
  const double load_cpu0 = load->CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int threads : o.threads) {
    auto run = RunThreadCount(**model, o, threads);
    if (!run.ok()) return run.status();
    report.runs.push_back(*std::move(run));
  }
  const std::chrono::duration<double> wall =
      std::chrono::steady_clock::now() - t0;
  if (load->running()) {
    report.background_cpu_share =
        (load->CpuSeconds() - load_cpu0) / std::max(1e-9, wall.count());
  }
  PrintReport(report, stdout);
  if (o.out_json.empty()) return absl::OkStatus();
  return WriteJson(report, o.out_json);
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "CPU engine benchmark: prefill/decode tok/s vs context depth and "
      "threads.\n  engine_bench [--model M.gguf] [--depths 0,4096,...] "
      "[--threads 1,2] [--dtype f16|q8_0|q4_k|...] [--kernels auto|scalar|...] "
      "[--background-load F] [--out-json F] [--quick]",
      &ckv::bench::EngineBenchOptionsFromFlags, &ckv::bench::Run);
}
