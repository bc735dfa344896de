// service_bench: the cost of serving over gRPC. For each session count N,
// N sessions are prefilled and then decode concurrently, once through the
// full gRPC service over loopback (client threads reading the Decode
// streams) and once in-process (the same engine objects driven directly),
// alternating the two modes over several rounds. Reports time to first
// token, inter-token latency p50/p99, aggregate tokens/s and the service
// overhead 1 - grpc / in-process tokens/s (service_report.h); scripts/
// bench.sh runs it and plots the JSON (plot_service.py).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "bench/service_grpc.h"
#include "bench/service_inprocess.h"
#include "bench/service_options.h"
#include "bench/service_report.h"

namespace ckv::bench {
namespace {

// Decode tokens of the untimed warm-up run.
constexpr int kWarmupDecodeTokens = 8;

struct Modes {
  std::unique_ptr<InProcessMode> inprocess;
  std::unique_ptr<GrpcMode> grpc;
};

absl::StatusOr<RunSample> RunOnce(ServiceMode& mode, const Workload& w,
                                  int round, int64_t prompt_tokens) {
  auto raw = mode.Run(w);
  if (!raw.ok()) return raw.status();
  auto sample = Summarize(*raw, prompt_tokens);
  if (!sample.ok()) return sample.status();
  sample->mode = mode.name();
  sample->round = round;
  std::fprintf(stderr,
               "service_bench: %-9s sessions %2d round %d: %7.1f tok/s, "
               "TTFT p50 %.1f ms, ITL p50 %.1f ms\n",
               sample->mode.c_str(), sample->sessions, round,
               sample->tokens_per_second, sample->ttft_p50_ms,
               sample->itl_p50_ms);
  return sample;
}

// Every round runs both modes; the order alternates so that drift of the
// machine does not favour one mode.
absl::Status RunAll(const ServiceBenchOptions& o, Modes& m,
                    ServiceReport& report) {
  const Model& model = m.inprocess->model();
  if (o.warmup) {
    const Workload w = MakeWorkload(o, model, 1, kWarmupDecodeTokens);
    if (auto r = m.grpc->Run(w); !r.ok()) return r.status();
    if (auto r = m.inprocess->Run(w); !r.ok()) return r.status();
  }
  for (int n : o.sessions) {
    const Workload w = MakeWorkload(o, model, n, o.decode_tokens);
    for (int round = 0; round < o.rounds; ++round) {
      ServiceMode* order[2] = {m.grpc.get(), m.inprocess.get()};
      if (round % 2 == 1) std::swap(order[0], order[1]);
      for (ServiceMode* mode : order) {
        auto s = RunOnce(*mode, w, round, o.prompt_tokens);
        if (!s.ok()) return s.status();
        report.samples.push_back(*std::move(s));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const ServiceBenchOptions& o) {
  ServiceReport report;
  report.options = &o;
  report.random_model = o.model.empty();
  auto path = report.random_model
                  ? EnsureRandomModel(o.random, o.work_dir, "service_bench")
                  : absl::StatusOr<std::string>(o.model);
  if (!path.ok()) return path.status();
  report.model_path = *path;
  const server::ServerConfig config = BenchServerConfig(o, *path);
  report.engine_threads = config.threads;
  Modes m;
  auto inprocess = InProcessMode::Start(config);
  if (!inprocess.ok()) return inprocess.status();
  m.inprocess = *std::move(inprocess);
  report.model = &m.inprocess->model();
  auto grpc = GrpcMode::Start(config, o.metrics, o.max_sessions());
  if (!grpc.ok()) return grpc.status();
  m.grpc = *std::move(grpc);
  if (auto s = RunAll(o, m, report); !s.ok()) return s;
  PrintReport(report, stdout);
  if (o.out_json.empty()) return absl::OkStatus();
  if (auto s = WriteTextFile(o.out_json, ReportJson(report).dump(2) + "\n");
      !s.ok()) {
    return s;
  }
  std::fprintf(stderr, "service_bench: wrote %s\n", o.out_json.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "gRPC service benchmark: TTFT, inter-token latency and tokens/s of N "
      "concurrent sessions over loopback vs in-process.\n  service_bench "
      "[--model M.gguf] [--sessions 1,4,16] [--prompt-tokens 512] "
      "[--decode-tokens 64] [--rounds 3] [--budget 1024] [--out-json F] "
      "[--quick]",
      &ckv::bench::ServiceBenchOptionsFromFlags, &ckv::bench::Run);
}
