// engine_bench: CPU prefill and decode throughput of the engine at several
// context depths and thread counts, against a memory-bandwidth floor measured
// in the same run. See engine_runner.h for the method; scripts/bench.sh runs
// it with the default settings and plots the result (plot_engine.py).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/engine_options.h"
#include "bench/engine_report.h"
#include "bench/engine_runner.h"
#include "bench/mem_bandwidth.h"
#include "model/make_random.h"
#include "model/model.h"

namespace ckv::bench {
namespace {

namespace fs = std::filesystem;

// File name that identifies the random model's spec, so that a cached file
// of another shape is never reused.
std::string RandomModelName(const RandomModelSpec& s) {
  const std::string vocab =
      s.vocab == "byte" ? "byte" : fs::path(s.vocab).stem().string();
  return absl::StrCat("random-", s.layers, "x", s.dim, "-h", s.heads, "kv",
                      s.kv_heads, "-ffn", s.ffn, "-",
                      kernels::DTypeName(s.dtype), "-", vocab, "-s", s.seed,
                      ".gguf");
}

// Writes the random model into work_dir unless it is already there.
absl::StatusOr<std::string> EnsureRandomModel(const EngineBenchOptions& o) {
  const RandomModelSpec& spec = o.random;
  if (spec.vocab != "byte" && !fs::exists(spec.vocab)) {
    return absl::NotFoundError(absl::StrCat(
        "vocabulary '", spec.vocab,
        "' not found: pass --vocab (a GGUF or 'byte') or --model"));
  }
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  const std::string path =
      (fs::path(o.work_dir) / RandomModelName(spec)).string();
  if (fs::exists(path)) return path;
  std::fprintf(stderr, "engine_bench: writing random model %s\n",
               path.c_str());
  const std::string tmp = path + ".tmp";
  if (auto s = WriteRandomModel(spec, tmp); !s.ok()) return s;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename: ", ec.message()));
  return path;
}

absl::Status WriteJson(const BenchReport& report, const std::string& path) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  std::ofstream out(path);
  out << ReportJson(report).dump(2) << "\n";
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  std::fprintf(stderr, "engine_bench: wrote %s\n", path.c_str());
  return absl::OkStatus();
}

absl::Status Run(const EngineBenchOptions& o) {
  BenchReport report;
  report.options = &o;
  report.random_model = o.model.empty();
  auto path = report.random_model ? EnsureRandomModel(o)
                                  : absl::StatusOr<std::string>(o.model);
  if (!path.ok()) return path.status();
  report.model_path = *path;
  auto model = LoadModel(*path);
  if (!model.ok()) return model.status();
  report.model = model->get();
  std::fprintf(stderr, "engine_bench: memory bandwidth probe\n");
  report.bandwidth =
      MeasureReadBandwidth(o.bandwidth_bytes, o.bandwidth_repeats);
  for (int threads : o.threads) {
    auto run = RunThreadCount(**model, o, threads);
    if (!run.ok()) return run.status();
    report.runs.push_back(*std::move(run));
  }
  PrintReport(report, stdout);
  if (o.out_json.empty()) return absl::OkStatus();
  return WriteJson(report, o.out_json);
}

// Accepts --foo-bar for the absl flag --foo_bar.
void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "CPU engine benchmark: prefill/decode tok/s vs context depth and "
      "threads.\n  engine_bench [--model M.gguf] [--depths 0,4096,...] "
      "[--threads 1,2] [--out-json F] [--quick]");
  ckv::bench::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  auto options = ckv::bench::EngineBenchOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (auto s = ckv::bench::Run(*options); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
