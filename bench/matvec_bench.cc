// Decode matmul benchmark: one token times a weight matrix (the GEMV that
// dominates decode) for each weight type on the same shapes in the same run,
// beside the measured single-thread memory read bandwidth. Reports per type
// the best time, weight GB/s, the fraction of the bandwidth floor and the
// speed-up over F16 weights (the baseline) at the same shape and threads.
// The types of one shape are timed round-robin (best of --reps rounds), so
// that other load on the machine affects each alike.
//
// usage: matvec_bench [--shapes 4096x4096,11008x4096] [--threads 1]
//   [--types f32,f16,q8_0,...] [--reps 10] [--kernels auto] [--out-json F]
// A shape is OUTxIN (rows x row length); IN must be a multiple of 256.
#include <algorithm>
#include <cstdio>
#include <functional>
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
#include "bench/mem_bandwidth.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, shapes, "4096x4096,11008x4096",
          "comma-separated OUTxIN weight shapes (IN a multiple of 256)");
ABSL_FLAG(std::string, threads, "1", "comma-separated thread counts");
ABSL_FLAG(std::string, types, "f32,f16,q8_0,q4_0,q4_k,q5_k,q6_k,q3_k,q2_k",
          "weight types (the f16 baseline is always measured)");
ABSL_FLAG(int, reps, 10, "timed repetitions per case (best is reported)");
ABSL_FLAG(std::string, kernels, "auto",
          "CPU kernels: auto|scalar|avx2|avx512|avx512_bf16");
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
  std::vector<int> threads;
  std::vector<DType> types;  // F16 first
  int reps = 10;
  std::string kernels;
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
  auto threads = ParseList<int>("threads", absl::GetFlag(FLAGS_threads), 1);
  if (!threads.ok()) return threads.status();
  o.threads = *threads;
  o.types.push_back(DType::kF16);
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_types), ',', absl::SkipEmpty())) {
    DType t;
    if (!kernels::ParseDTypeName(std::string(s).c_str(), &t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--types: unknown type '", s, "'"));
    }
    if (std::find(o.types.begin(), o.types.end(), t) == o.types.end()) {
      o.types.push_back(t);
    }
  }
  o.reps = std::max(1, absl::GetFlag(FLAGS_reps));
  o.kernels = absl::GetFlag(FLAGS_kernels);
  o.out_json = absl::GetFlag(FLAGS_out_json);
  return o;
}

// Best time of each fn over `reps` interleaved rounds.
std::vector<double> BestSecondsInterleaved(
    int reps, const std::vector<std::function<void()>>& fns) {
  std::vector<double> best;
  for (const auto& s : TimeInterleaved(reps, fns)) {
    best.push_back(*std::min_element(s.begin(), s.end()));
  }
  return best;
}

absl::Status Run(const Options& o) {
  if (!kernels::cpu::SelectKernels(o.kernels.c_str())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kernels ", o.kernels, " is not available here"));
  }
  const BandwidthResult bw = MeasureReadBandwidth(int64_t{256} << 20, 3);
  std::printf("kernels: %s | cpu: %s | read bandwidth (1 thread): %.2f GB/s\n",
              kernels::cpu::KernelSetName(),
              kernels::cpu::DescribeCpuFeatures().c_str(),
              bw.bytes_per_second / 1e9);
  Json cases = Json::array();
  for (const Shape& sh : o.shapes) {
    std::vector<float> x(sh.n_in), y(sh.n_out);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : x) v = dist(rng);
    std::vector<std::vector<uint8_t>> weights;
    for (DType t : o.types)
      weights.push_back(RandomWeightMatrix(t, sh.n_out, sh.n_in));
    for (int threads : o.threads) {
      kernels::cpu::ThreadPool pool(threads);
      std::vector<std::function<void()>> fns;
      for (size_t i = 0; i < o.types.size(); ++i) {
        fns.push_back([&, t = o.types[i], w = weights[i].data()] {
          kernels::cpu::MatMul(&pool, t, w, sh.n_in, sh.n_out, x.data(), 1,
                               y.data());
        });
      }
      const std::vector<double> best = BestSecondsInterleaved(o.reps, fns);
      const double f16_seconds = best[0];  // o.types[0] is F16
      for (size_t i = 0; i < o.types.size(); ++i) {
        const DType t = o.types[i];
        const double s = best[i];
        const double bytes = static_cast<double>(weights[i].size());
        const double gbs = bytes / s / 1e9;
        const double floor = gbs * 1e9 / bw.bytes_per_second;
        std::printf(
            "%5lldx%-5lld %-5s threads=%d %8.3f ms %6.2f GB/s "
            "(%.2f of bandwidth) x%.2f vs F16  [%s]\n",
            static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in),
            kernels::DTypeName(t), threads, s * 1e3, gbs, floor,
            f16_seconds / s, kernels::cpu::QuantDotPath(t));
        cases.push_back(Json{{"n_out", sh.n_out},
                             {"n_in", sh.n_in},
                             {"type", kernels::DTypeName(t)},
                             {"threads", threads},
                             {"weight_bytes", weights[i].size()},
                             {"best_seconds", s},
                             {"gb_per_s", gbs},
                             {"bandwidth_fraction", floor},
                             {"speedup_vs_f16", f16_seconds / s},
                             {"path", kernels::cpu::QuantDotPath(t)}});
      }
    }
  }
  if (o.out_json.empty()) return absl::OkStatus();
  const Json doc{{"benchmark", "matvec_bench"},
                 {"timestamp", UtcTimestamp()},
                 {"kernel_set", kernels::cpu::KernelSetName()},
                 {"cpu_features", kernels::cpu::DescribeCpuFeatures()},
                 {"reps", o.reps},
                 {"bandwidth_gb_per_s", bw.bytes_per_second / 1e9},
                 {"cases", cases}};
  return WriteTextFile(o.out_json, doc.dump(2) + "\n");
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain<ckv::bench::Options>(
      argc, argv,
      "matvec_bench: decode GEMV per weight type vs F16, same shapes, one run",
      ckv::bench::OptionsFromFlags, ckv::bench::Run);
}
