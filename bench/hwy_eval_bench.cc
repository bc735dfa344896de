// hwy_eval_bench: should the hand-written AVX2/AVX-512 kernels become one
// Google Highway source? Times the decode GEMV with F16 and F32 weights (the
// op that dominates decode) written once with Highway (dynamic dispatch over
// the targets this CPU has) against the project's own kernels
// (kernels/cpu, MatMul with one token) on the same matrices in the same run,
// round-robin, best of --reps. Checks both against the scalar reference
// first. Reports the Highway target that ran and time ratios; the decision
// and its figures are in docs/kernels.md.
//
// usage: hwy_eval_bench [--shapes 4096x4096,11008x4096] [--reps 20]
//   [--out-json F]
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/hwy_eval_bench.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "kernels/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace ckv::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float HalfToFloat(hwy::float16_t h) {
  uint16_t bits;
  hwy::CopyBytes<2>(&h, &bits);
  return kernels::F16ToF32(bits);
}

// y[r] = sum_i W[r][i] * x[i]; rows of n F16 (T = hwy::float16_t) or F32
// elements; n a multiple of 4 lanes' worth is not required (scalar tail).
template <typename T>
void GemvHwy(const T* w, int64_t n_rows, int64_t n, const float* x, float* y) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<T, decltype(df)> dw;  // as many lanes of T as of float
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    const T* row = w + r * n;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
      a0 = hn::MulAdd(hn::PromoteTo(df, hn::LoadU(dw, row + i)),
                      hn::LoadU(df, x + i), a0);
      a1 = hn::MulAdd(hn::PromoteTo(df, hn::LoadU(dw, row + i + lanes)),
                      hn::LoadU(df, x + i + lanes), a1);
    }
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
    for (; i < n; ++i) s += HalfToFloat(row[i]) * x[i];
    y[r] = s;
  }
}

void GemvF16(const void* w, int64_t n_rows, int64_t n, const float* x,
             float* y) {
  GemvHwy(static_cast<const hwy::float16_t*>(w), n_rows, n, x, y);
}

void GemvF32(const void* w, int64_t n_rows, int64_t n, const float* x,
             float* y) {
  const hn::ScalableTag<float> df;
  const auto* wf = static_cast<const float*>(w);
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = wf + r * n;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
      a0 = hn::MulAdd(hn::LoadU(df, row + i), hn::LoadU(df, x + i), a0);
      a1 = hn::MulAdd(hn::LoadU(df, row + i + lanes),
                      hn::LoadU(df, x + i + lanes), a1);
    }
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
    for (; i < n; ++i) s += row[i] * x[i];
    y[r] = s;
  }
}

}  // namespace ckv::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_common.h"
#include "bench/bench_main.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, shapes, "4096x4096,11008x4096,1536x512",
          "comma-separated OUTxIN weight shapes");
ABSL_FLAG(int, reps, 20, "timed rounds (best is reported)");
ABSL_FLAG(std::string, out_json, "", "write the results as JSON here");

namespace ckv::bench {
HWY_EXPORT(GemvF16);
HWY_EXPORT(GemvF32);

namespace {

using kernels::DType;
using GemvFn = void (*)(const void*, int64_t, int64_t, const float*, float*);

struct Options {
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (out, in)
  int reps = 20;
  std::string out_json;
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    std::vector<std::string> p = absl::StrSplit(s, 'x');
    int64_t out = 0, in = 0;
    if (p.size() != 2 || !absl::SimpleAtoi(p[0], &out) ||
        !absl::SimpleAtoi(p[1], &in) || out < 1 || in < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shapes: '", s, "' is not OUTxIN"));
    }
    o.shapes.emplace_back(out, in);
  }
  o.reps = std::max(1, absl::GetFlag(FLAGS_reps));
  o.out_json = absl::GetFlag(FLAGS_out_json);
  return o;
}

double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Largest |a - b| / (sum_i |w_ri x_i| + tiny) over rows: the error relative
// to the dot product's own magnitude.
double MaxRelError(const std::vector<float>& a, const std::vector<float>& b,
                   const std::vector<float>& scale) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / (scale[i] + 1e-30));
  }
  return worst;
}

struct Case {
  DType type;
  int64_t n_out, n_in;
  double ours_s = 1e30, hwy_s = 1e30, ours_err = 0, hwy_err = 0;
};

// Times ours vs Highway on one shape and type; errors vs the reference.
absl::Status RunCase(Case& c, int reps) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t row_bytes = kernels::RowBytes(c.type, c.n_in);
  std::vector<uint8_t> w(row_bytes * c.n_out);
  std::vector<float> row(c.n_in), x(c.n_in), scale(c.n_out, 0.0f);
  for (float& v : x) v = dist(rng);
  for (int64_t r = 0; r < c.n_out; ++r) {
    for (float& v : row) v = dist(rng);
    kernels::cpu::QuantizeRow(c.type, row.data(), c.n_in,
                              w.data() + r * row_bytes);
    kernels::ref::DequantizeRow(c.type, w.data() + r * row_bytes, c.n_in,
                                     row.data());
    for (int64_t i = 0; i < c.n_in; ++i) scale[r] += std::abs(row[i] * x[i]);
  }
  std::vector<float> want(c.n_out), ours(c.n_out), hw(c.n_out);
  kernels::ref::MatMul(c.type, w.data(), c.n_in, c.n_out, x.data(), 1,
                            want.data());
  const GemvFn hwy_fn = c.type == DType::kF16 ? HWY_DYNAMIC_DISPATCH(GemvF16)
                                              : HWY_DYNAMIC_DISPATCH(GemvF32);
  auto run_ours = [&] {
    kernels::cpu::MatMul(nullptr, c.type, w.data(), c.n_in, c.n_out, x.data(),
                         1, ours.data());
  };
  auto run_hwy = [&] {
    hwy_fn(w.data(), c.n_out, c.n_in, x.data(), hw.data());
  };
  run_ours();
  run_hwy();
  c.ours_err = MaxRelError(ours, want, scale);
  c.hwy_err = MaxRelError(hw, want, scale);
  if (c.ours_err > 1e-5 || c.hwy_err > 1e-5) {
    return absl::InternalError(
        absl::StrCat("GEMV disagrees with the reference: ours ", c.ours_err,
                     ", highway ", c.hwy_err, " (relative to sum |w x|)"));
  }
  for (int i = 0; i < reps; ++i) {  // alternate so load falls on both alike
    c.ours_s = std::min(c.ours_s, Seconds(run_ours));
    c.hwy_s = std::min(c.hwy_s, Seconds(run_hwy));
  }
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  // Dynamic dispatch runs the best target: the lowest bit.
  const char* target =
      hwy::TargetName(hwy::SupportedAndGeneratedTargets().front());
  std::printf("hwy_eval_bench: ours %s | highway target %s | 1 thread | %s\n",
              kernels::cpu::KernelSetName(), target,
              kernels::cpu::DescribeCpuFeatures().c_str());
  nlohmann::json cases = nlohmann::json::array();
  for (auto [out, in] : o.shapes) {
    for (DType t : {DType::kF16, DType::kF32}) {
      Case c{t, out, in};
      if (auto s = RunCase(c, o.reps); !s.ok()) return s;
      const double gb = kernels::RowBytes(t, in) * out / 1e9;
      std::printf(
          "  %-3s %6lldx%-6lld ours %8.3f ms (%5.1f GB/s)  highway %8.3f ms "
          "(%5.1f GB/s)  highway/ours time %.3f\n",
          kernels::DTypeName(t), static_cast<long long>(out),
          static_cast<long long>(in), 1e3 * c.ours_s, gb / c.ours_s,
          1e3 * c.hwy_s, gb / c.hwy_s, c.hwy_s / c.ours_s);
      cases.push_back({{"type", kernels::DTypeName(t)},
                       {"n_out", out},
                       {"n_in", in},
                       {"ours_ms", 1e3 * c.ours_s},
                       {"highway_ms", 1e3 * c.hwy_s},
                       {"highway_over_ours_time", c.hwy_s / c.ours_s},
                       {"ours_max_rel_err", c.ours_err},
                       {"highway_max_rel_err", c.hwy_err}});
    }
  }
  if (o.out_json.empty()) return absl::OkStatus();
  nlohmann::json j = {{"bench", "hwy_eval"},
                      {"time", UtcTimestamp()},
                      {"kernel_set", kernels::cpu::KernelSetName()},
                      {"highway_target", target},
                      {"threads", 1},
                      {"cases", cases}};
  return WriteTextFile(o.out_json, j.dump(1) + "\n");
}

}  // namespace
}  // namespace ckv::bench

int main(int argc, char** argv) {
  return ckv::bench::BenchMain(
      argc, argv,
      "Decode GEMV (F16, F32 weights) written once with Google Highway vs "
      "the project's kernels, same matrices, same run.\n  hwy_eval_bench "
      "[--shapes 4096x4096,11008x4096] [--reps 20] [--out-json F]",
      &ckv::bench::OptionsFromFlags, &ckv::bench::Run);
}
#endif  // HWY_ONCE
