// Fast MatMul and elementwise ops against ref:: on random inputs with odd
// sizes, for every kernel table this CPU runs and 1-3 threads.
#include <cmath>
#include <memory>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::AvailableKernelSets;
using testing::Encode;
using testing::RandomFloats;
using testing::ScopedKernels;

// Relative tolerance on sum_i |w_i x_i| (weights are decoded exactly, so
// only F32 accumulation order differs from the double reference).
double MatMulTolerance(DType t) {
  switch (t) {
    case DType::kF32:
      return 2e-6;
    case DType::kF16:
      return 2e-6;
    case DType::kBF16:
      return 2e-6;
    default:  // block types
      return 2e-6;
  }
}

// The BF16 GEMM (tables with gemm_bf16_tile, from kGemmMinTokens tokens on)
// rounds both operands to BF16: each to within 2^-9 of itself, so a
// product to within about 2^-8 and the sum to within 2^-8 * sum_i |w_i x_i|
// of the exact one. Stated bound: 2^-7 of that magnitude. Against its own
// reference (ref::MatMulBf16) only the F32 summation differs: 2e-6.
constexpr double kBf16GemmTolerance = 1.0 / 128;

bool TakesBf16Gemm(int64_t n_tokens) {
  return ActiveKernels().gemm_bf16_tile != nullptr &&
         n_tokens >= kGemmMinTokens;
}

std::string SetName(const ::testing::TestParamInfo<const KernelSet*>& i) {
  return i.param->name;
}

class FastOpsTest : public ::testing::TestWithParam<const KernelSet*> {
 protected:
  ScopedKernels scoped_{GetParam()};
};

void CheckMatMul(ThreadPool* pool, DType t, int64_t n_in, int64_t n_out,
                 int64_t n_tokens, std::mt19937& rng) {
  const std::vector<float> wf = RandomFloats(rng, n_in * n_out);
  const std::vector<float> x = RandomFloats(rng, n_in * n_tokens);
  const std::vector<uint8_t> w = Encode(t, wf, n_out, n_in);
  std::vector<float> y(n_out * n_tokens, NAN), yr(n_out * n_tokens);
  MatMul(pool, t, w.data(), n_in, n_out, x.data(), n_tokens, y.data());
  ref::MatMul(t, w.data(), n_in, n_out, x.data(), n_tokens, yr.data());
  const bool bf16 = TakesBf16Gemm(n_tokens);
  std::vector<float> yb(bf16 ? n_out * n_tokens : 0);
  if (bf16) {
    ref::MatMulBf16(t, w.data(), n_in, n_out, x.data(), n_tokens, yb.data());
  }
  std::vector<float> wrow(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    ref::DequantizeRow(t, w.data() + o * RowBytes(t, n_in), n_in, wrow.data());
    for (int64_t tk = 0; tk < n_tokens; ++tk) {
      double mag = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        mag += std::fabs(wrow[i] * x[tk * n_in + i]);
      }
      if (bf16) {
        const int64_t i = tk * n_out + o;
        ASSERT_NEAR(y[i], yb[i], MatMulTolerance(t) * mag + 1e-7)
            << "vs ref::MatMulBf16 " << DTypeName(t) << " n_in=" << n_in
            << " n_out=" << n_out << " n_tokens=" << n_tokens << " o=" << o;
        ASSERT_NEAR(y[i], yr[i], kBf16GemmTolerance * mag + 1e-7)
            << "vs ref::MatMul " << DTypeName(t) << " n_in=" << n_in;
        continue;
      }
      // Tables with integer dot products quantise the activations (GEMV).
      const double act =
          IsQuantized(t) && ActiveKernels().quant_gemv != nullptr
              ? 1.001 * testing::ActQuantBound(wrow.data(),
                                               x.data() + tk * n_in, n_in)
              : 0.0;
      ASSERT_NEAR(y[tk * n_out + o], yr[tk * n_out + o],
                  MatMulTolerance(t) * mag + act + 1e-7)
          << DTypeName(t) << " n_in=" << n_in << " n_out=" << n_out
          << " n_tokens=" << n_tokens << " o=" << o << " t=" << tk;
    }
  }
}

TEST_P(FastOpsTest, MatMulAllDtypesOddSizes) {
  std::mt19937 rng(1);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
      const std::vector<int64_t> n_ins = t == DType::kQ8_0
                                             ? std::vector<int64_t>{32, 96, 160}
                                             : std::vector<int64_t>{1, 67, 129};
      for (int64_t n_in : n_ins) {
        for (int64_t n_out : {1, 13, 37}) {
          for (int64_t n_tokens : {1, 3, 5, 6, 17, 70}) {
            CheckMatMul(&pool, t, n_in, n_out, n_tokens, rng);
          }
        }
      }
    }
  }
}

TEST_P(FastOpsTest, MatMulWithoutPoolAndLargerShapes) {
  std::mt19937 rng(2);
  CheckMatMul(nullptr, DType::kF16, 512, 200, 1, rng);
  CheckMatMul(nullptr, DType::kF16, 512, 77, 67, rng);
  ThreadPool pool(2);
  CheckMatMul(&pool, DType::kQ8_0, 1536, 64, 9, rng);
  CheckMatMul(&pool, DType::kBF16, 300, 41, 100, rng);
  CheckMatMul(&pool, DType::kF16, 1000, 70, 25, rng);
}

TEST_P(FastOpsTest, RmsNorm) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  for (int64_t n : {1, 7, 67, 512}) {
    const int64_t rows = 5;
    const auto x = RandomFloats(rng, rows * n, -3, 3);
    const auto w = RandomFloats(rng, n);
    std::vector<float> y(rows * n), yr(rows * n);
    RmsNorm(&pool, x.data(), w.data(), rows, n, 1e-5f, y.data());
    ref::RmsNorm(x.data(), w.data(), rows, n, 1e-5f, yr.data());
    for (int64_t i = 0; i < rows * n; ++i) {
      ASSERT_NEAR(y[i], yr[i], 1e-5 * (std::fabs(yr[i]) + 1e-3)) << n;
    }
  }
}

TEST_P(FastOpsTest, RopeBothModesWithAndWithoutFreqFactors) {
  std::mt19937 rng(4);
  ThreadPool pool(3);
  const int n_heads = 3, head_dim = 16;
  const int64_t n_tokens = 17;
  std::vector<int64_t> pos(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) pos[t] = t * t * 31 + 5;  // to ~9k
  const std::vector<float> ff = RandomFloats(rng, head_dim / 2, 1.0f, 8.0f);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int rot : {head_dim, head_dim / 2}) {
      for (bool use_ff : {false, true}) {
        RopeParams p;
        p.mode = mode;
        p.rot_dims = rot;
        p.freq_base = 500000.0f;
        p.freq_scale = 0.5f;
        p.freq_factors = use_ff ? ff.data() : nullptr;
        auto x = RandomFloats(rng, n_tokens * n_heads * head_dim);
        auto xr = x;
        Rope(&pool, x.data(), n_tokens, n_heads, head_dim, pos.data(), p);
        ref::Rope(xr.data(), n_tokens, n_heads, head_dim, pos.data(), p);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], xr[i], 2e-6) << "i=" << i << " rot=" << rot;
        }
      }
    }
  }
}

TEST(RefRopeTest, NormalAndNeoxPairs) {
  // Position 1, theta_0 = 1 rad: pair 0 is (x0, x1) in normal mode and
  // (x0, x2) in neox mode; dims >= rot_dims stay unchanged.
  const int64_t pos = 1;
  RopeParams p;
  p.rot_dims = 4;
  float a[6] = {1, 0, 0, 0, 7, 8};
  ref::Rope(a, 1, 1, 6, &pos, p);
  EXPECT_NEAR(a[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(a[1], std::sin(1.0), 1e-6);
  EXPECT_EQ(a[4], 7);
  EXPECT_EQ(a[5], 8);
  p.mode = RopeMode::kNeox;
  float b[6] = {1, 0, 0, 0, 7, 8};
  ref::Rope(b, 1, 1, 6, &pos, p);
  EXPECT_NEAR(b[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(b[2], std::sin(1.0), 1e-6);
  EXPECT_EQ(b[1], 0.0f);
}

TEST_P(FastOpsTest, SwiGluAddBiasAdd) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (int64_t n : {1, 15, 17, 1536, 10001}) {
    const auto g = RandomFloats(rng, n, -30, 30);
    const auto u = RandomFloats(rng, n, -2, 2);
    std::vector<float> y(n), yr(n);
    SwiGlu(&pool, g.data(), u.data(), n, y.data());
    ref::SwiGlu(g.data(), u.data(), n, yr.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y[i], yr[i], 1e-6 * (std::fabs(yr[i]) + 1e-3)) << g[i];
    }
  }
  const int64_t rows = 3, n = 19;
  auto x = RandomFloats(rng, rows * n);
  auto xr = x;
  const auto b = RandomFloats(rng, n);
  AddBias(x.data(), b.data(), rows, n);
  ref::AddBias(xr.data(), b.data(), rows, n);
  EXPECT_EQ(x, xr);
  Add(x.data(), b.data(), n);
  ref::Add(xr.data(), b.data(), n);
  EXPECT_EQ(x, xr);
}

TEST_P(FastOpsTest, DequantizeRowMatchesReference) {
  std::mt19937 rng(6);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    for (int64_t n : {32, 64, 160}) {
      const auto src = RandomFloats(rng, n, -5, 5);
      const auto enc = Encode(t, src, 1, n);
      std::vector<float> y(n), yr(n);
      DequantizeRow(t, enc.data(), n, y.data());
      ref::DequantizeRow(t, enc.data(), n, yr.data());
      EXPECT_EQ(y, yr) << DTypeName(t);
    }
  }
  for (int64_t n : {1, 17, 33}) {  // non-block types at odd sizes
    const auto src = RandomFloats(rng, n);
    const auto enc = Encode(DType::kF16, src, 1, n);
    std::vector<float> y(n), yr(n);
    DequantizeRow(DType::kF16, enc.data(), n, y.data());
    ref::DequantizeRow(DType::kF16, enc.data(), n, yr.data());
    EXPECT_EQ(y, yr);
  }
}

TEST(KernelSetTest, NameIsReported) {
  const std::string name = KernelSetName();
  // avx512_bf16 is never the default (it rounds prefill operands).
  EXPECT_TRUE(name == "avx512" || name == "avx2" || name == "scalar") << name;
  ::testing::Test::RecordProperty("kernel_set", name);
  std::printf("kernel set: %s (cpu: %s)\n", name.c_str(),
              DescribeCpuFeatures().c_str());
}

INSTANTIATE_TEST_SUITE_P(Sets, FastOpsTest,
                         ::testing::ValuesIn(AvailableKernelSets()), SetName);

}  // namespace
}  // namespace ckv::kernels::cpu
