// Prefill matmul benchmark: a chunk of tokens times a weight matrix (the
// GEMM that dominates prefill) for each weight type under each kernel table,
// on the same matrices in the same run. The first table of --tables is the
// baseline: every other table's mean time is reported as a speed-up over it
// at the same shape, type and thread count. The tables of one case are timed
// round-robin (one call of each in turn, --reps rounds; the mean is
// reported, as a user waits for it), so that other load on the machine falls
// on each alike.
//
// usage: gemm_bench [--shapes 2048x2048,8192x2048,2048x8192] [--tokens 256]
//   [--threads 1,2] [--types f16,bf16,q8_0,q4_k] [--tables avx512,avx512_bf16]
//   [--reps 5] [--out-json F]
// A shape is OUTxIN (rows x row length); IN must be a multiple of 256.
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, shapes, "2048x2048,8192x2048,2048x8192",
          "comma-separated OUTxIN weight shapes (IN a multiple of 256); the "
          "default: the attention and FFN matrices of a 1B Llama");
ABSL_FLAG(int, tokens, 256, "tokens per call (the prefill chunk)");
ABSL_FLAG(std::string, threads, "1,2", "comma-separated thread counts");
ABSL_FLAG(std::string, types, "f16,bf16,q8_0,q4_k", "weight types");
ABSL_FLAG(std::string, tables, "avx512,avx512_bf16",
          "kernel tables (the first is the baseline): "
          "scalar|avx2|avx512|avx512_bf16");
ABSL_FLAG(int, reps, 5, "timed rounds per case (the mean is reported)");
ABSL_FLAG(std::string, out_json, "", "write the results as JSON here");

namespace ckv::bench {
namespace {

using kernels::DType;
using Json = nlohmann::json;

struct Shape {
  int64_t n_out = 0, n_in = 0;
};

struct Options {
  std::vector<Shape> shapes;
  int tokens = 256;
  std::vector<int> threads;
  std::vector<DType> types;
  std::vector<std::string> tables;
  int reps = 5;
  std::string out_json;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(s, 'x');
    Shape sh;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &sh.n_out) ||
        !absl::SimpleAtoi(parts[1], &sh.n_in) || sh.n_out < 1 ||
        sh.n_in < 256 || sh.n_in % 256 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shapes: '", s, "' is not OUTxIN, IN % 256 == 0"));
    }
    o.shapes.push_back(sh);
  }
  if (o.shapes.empty()) return absl::InvalidArgumentError("--shapes is empty");
  o.tokens = absl::GetFlag(FLAGS_tokens);
  if (o.tokens < 1) return absl::InvalidArgumentError("--tokens must be >= 1");
  auto threads = ParseList<int>("threads", absl::GetFlag(FLAGS_threads), 1);
  if (!threads.ok()) return threads.status();
  o.threads = *threads;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_types), ',', absl::SkipEmpty())) {
    DType t;
    if (!kernels::ParseDTypeName(std::string(s).c_str(), &t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--types: unknown type '", s, "'"));
    }
    o.types.push_back(t);
  }
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_tables), ',', absl::SkipEmpty())) {
    const std::string name(s);
    if (!kernels::cpu::SelectKernels(name.c_str())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tables: '", name, "' is not available on this CPU (",
                       kernels::cpu::DescribeCpuFeatures(), ")"));
    }
    o.tables.push_back(name);
  }
  kernels::cpu::SelectKernels("auto");
  if (o.types.empty() || o.tables.empty()) {
    return absl::InvalidArgumentError("--types and --tables must be given");
  }
  o.reps = std::max(1, absl::GetFlag(FLAGS_reps));
  o.out_json = absl::GetFlag(FLAGS_out_json);
  return o;
}

// Mean time of each fn over `reps` interleaved rounds.
std::vector<double> MeanSecondsInterleaved(
    int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<double> mean;
  for (const auto& s : TimeInterleaved(reps, fns)) {
    mean.push_back(std::accumulate(s.begin(), s.end(), 0.0) / s.size());
  }
  return mean;
}

absl::Status Run(const Options& o) {
  std::printf("cpu: %s | tokens per call: %d | baseline table: %s\n",
              kernels::cpu::DescribeCpuFeatures().c_str(), o.tokens,
              o.tables[0].c_str());
  Json cases = Json::array();
  for (const Shape& sh : o.shapes) {
    std::vector<float> x(sh.n_in * o.tokens), y(sh.n_out * o.tokens);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    for (DType t : o.types) {
      const std::vector<uint8_t> w = RandomWeightMatrix(t, sh.n_out, sh.n_in);
      for (int threads : o.threads) {
        kernels::cpu::ThreadPool pool(threads);
        std::vector<std::function<void()>> fns;
        for (const std::string& table : o.tables) {
          fns.push_back([&, table] {
            kernels::cpu::SelectKernels(table.c_str());
            kernels::cpu::MatMul(&pool, t, w.data(), sh.n_in, sh.n_out,
                                 x.data(), o.tokens, y.data());
          });
        }
        const std::vector<double> mean = MeanSecondsInterleaved(o.reps, fns);
        kernels::cpu::SelectKernels("auto");
        const double flop = 2.0 * sh.n_in * sh.n_out * o.tokens;
        for (size_t i = 0; i < o.tables.size(); ++i) {
          const double gflops = flop / mean[i] / 1e9;
          std::printf(
              "%5lldx%-5lld %-5s threads=%d %-12s %8.3f ms %7.1f GFLOP/s "
              "x%.2f vs %s\n",
              static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in),
              kernels::DTypeName(t), threads, o.tables[i].c_str(),
              mean[i] * 1e3, gflops, mean[0] / mean[i], o.tables[0].c_str());
          cases.push_back(Json{{"n_out", sh.n_out},
                               {"n_in", sh.n_in},
                               {"tokens", o.tokens},
                               {"type", kernels::DTypeName(t)},
                               {"threads", threads},
                               {"table", o.tables[i]},
                               {"mean_seconds", mean[i]},
                               {"gflop_per_s", gflops},
                               {"speedup_vs_baseline", mean[0] / mean[i]}});
        }
      }
    }
  }
  if (o.out_json.empty()) return absl::OkStatus();
  const Json doc{{"benchmark", "gemm_bench"},
                 {"timestamp", UtcTimestamp()},
                 {"cpu_features", kernels::cpu::DescribeCpuFeatures()},
                 {"baseline_table", o.tables[0]},
                 {"reps", o.reps},
                 {"cases", cases}};
  return WriteTextFile(o.out_json, doc.dump(2) + "\n");
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain<ckv::bench::Options>(
      argc, argv,
      "gemm_bench: prefill GEMM per kernel table vs the first, same matrices",
      ckv::bench::OptionsFromFlags, ckv::bench::Run);
}
