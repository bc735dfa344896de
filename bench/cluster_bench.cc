// cluster_bench: the ClusterKV benchmark. Three workloads (see
// cluster_keys.h, cluster_engine.h and cluster_text.h; `text`, quality on a
// real model and text, runs only when --workloads names it): `keys` measures
// recall (clusterkv vs quest vs streaming at equal budget, the
// clustering-metric and tokens-per-cluster ablations) and the cost of one
// attention layer on synthetic keys with the structure of real ones; `engine`
// runs the transformer end to end (prefill once, many sessions decoding forks
// of it) and splits steps into attention, selection and the rest. Writes a JSON
// (--json) and, via plot_cluster.py, PNGs next to it; scripts/bench.sh runs
// the full settings.
#include <chrono>
#include <cstdio>
#include <thread>

#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "bench/cluster_engine.h"
#include "bench/cluster_keys.h"
#include "bench/cluster_options.h"
#include "bench/cluster_report.h"
#include "bench/cluster_text.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/kv/cluster_worker.h"

namespace ckv::bench {
namespace {

void PrintHeader(const ClusterBenchOptions& o, int threads) {
  std::printf("cluster_bench%s | cpu: %s | kernels: %s | threads %d of %u\n",
              o.quick ? " --quick" : "",
              kernels::cpu::DescribeCpuFeatures().c_str(),
              kernels::cpu::KernelSetName(), threads,
              std::thread::hardware_concurrency());
  if (o.run_keys) {
    std::printf(
        "keys: one attention layer, %d query / %d KV heads, head dim "
        "%d, every layer sparse; clustering on one worker thread\n",
        o.heads, o.kv_heads, o.head_dim);
  }
  std::fflush(stdout);
}

absl::Status Run(const ClusterBenchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  ClusterReport report;
  report.options = &o;
  report.threads = o.threads > 0
                       ? o.threads
                       : std::max(1u, std::thread::hardware_concurrency());
  PrintHeader(o, report.threads);
  ClusterWorker worker;
  if (o.run_keys) {
    kernels::cpu::ThreadPool pool(report.threads);
    if (auto s = RunKeysWorkload(o, &pool, &worker, &report.runs); !s.ok()) {
      return s;
    }
  }
  if (o.run_engine) {
    if (auto s = RunEngineWorkload(o, report.threads, &worker, &report);
        !s.ok()) {
      return s;
    }
  }
  if (o.run_text) {
    if (auto s = RunTextWorkload(o, report.threads, &report); !s.ok()) {
      return s;
    }
  }
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  PrintSummary(report, stdout);
  if (auto s = WriteTextFile(o.out_json, ReportJson(report).dump(2) + "\n");
      !s.ok()) {
    return s;
  }
  std::fprintf(stderr, "cluster_bench: wrote %s\n", o.out_json.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "ClusterKV benchmark: recall vs budget, step time vs context, overhead."
      "\n  cluster_bench [--quick] [--json F] [--workloads keys,engine] "
      "[--budgets 256,...] [--key-contexts ...] [--engine-contexts ...] "
      "[--batches 1,4,16] [--workloads text --text-model M --text-file F]",
      &ckv::bench::ClusterBenchOptionsFromFlags, &ckv::bench::Run);
}
