// Quantised weight types: the quantiser round-trips through the reference
// dequantiser; every fast kernel table's dequantisation equals the
// reference; its integer-dot MatMul stays within the activation-rounding
// bound of the reference MatMul on odd sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant_blocks.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::ActQuantBound;
using testing::AvailableKernelSets;
using testing::RandomFloats;
using testing::ScopedKernels;

struct TypeCase {
  DType type;
  // Bound on rms(dequant(quant(x)) - x) / rms(x) for x uniform in [-1, 1]:
  // about 1 / (levels - 1) (a step over sqrt(12), over rms(x)). Measured
  // on these rows (max over lengths): Q4_0 .068, Q4_1 .065, Q5_0 .032,
  // Q5_1 .030, Q8_0 .0039, Q2_K .275, Q3_K .135, Q4_K .062, Q5_K .030,
  // Q6_K .0153, IQ4_NL .075, IQ4_XS .071; bounds are ~1.3x those. A packing
  // bug (wrong nibble, bit or scale) gives errors of order 1.
  double rms_tolerance;
};

const TypeCase kTypes[] = {
    {DType::kQ4_0, 0.09}, {DType::kQ4_1, 0.085},  {DType::kQ5_0, 0.042},
    {DType::kQ5_1, 0.04}, {DType::kQ8_0, 0.0052}, {DType::kQ2_K, 0.36},
    {DType::kQ3_K, 0.18}, {DType::kQ4_K, 0.08},   {DType::kQ5_K, 0.04},
    {DType::kQ6_K, 0.02}, {DType::kIQ4_NL, 0.1},  {DType::kIQ4_XS, 0.095},
};

std::string TypeName(const ::testing::TestParamInfo<TypeCase>& i) {
  return DTypeName(i.param.type);
}

class QuantTypeTest : public ::testing::TestWithParam<TypeCase> {};

// Row lengths: odd multiples of the block size.
std::vector<int64_t> OddLengths(DType t) {
  const int64_t bs = BlockSize(t);
  return bs == 32 ? std::vector<int64_t>{32, 96, 288, 800}
                  : std::vector<int64_t>{256, 768, 1280};
}

TEST_P(QuantTypeTest, QuantiserRoundTripsThroughReference) {
  const DType t = GetParam().type;
  std::mt19937 rng(11);
  for (int64_t n : OddLengths(t)) {
    const std::vector<float> x = RandomFloats(rng, n);
    std::vector<uint8_t> q(RowBytes(t, n));
    QuantizeRow(t, x.data(), n, q.data());
    std::vector<float> back(n);
    ref::DequantizeRow(t, q.data(), n, back.data());
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    const double rel = std::sqrt(err / ref);
    EXPECT_LE(rel, GetParam().rms_tolerance) << DTypeName(t) << " n=" << n;
    // Zeros stay exact zeros (no division by a zero scale).
    const std::vector<float> zeros(n, 0.0f);
    QuantizeRow(t, zeros.data(), n, q.data());
    ref::DequantizeRow(t, q.data(), n, back.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 0.0f) << i;
  }
}

TEST_P(QuantTypeTest, EveryTableDequantisesLikeReference) {
  const DType t = GetParam().type;
  std::mt19937 rng(12);
  for (const KernelSet* ks : AvailableKernelSets()) {
    for (int64_t n : OddLengths(t)) {
      const std::vector<float> x = RandomFloats(rng, n, -3.0f, 2.0f);
      std::vector<uint8_t> q(RowBytes(t, n));
      QuantizeRow(t, x.data(), n, q.data());
      std::vector<float> want(n), got(n);
      ref::DequantizeRow(t, q.data(), n, want.data());
      ks->to_f32(t, q.data(), n, got.data());
      for (int64_t i = 0; i < n; ++i) {
        // Same formula; only FMA contraction may round differently.
        ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i])))
            << ks->name << " " << DTypeName(t) << " n=" << n << " i=" << i;
      }
    }
  }
}

// Fast MatMul (every table, GEMV and GEMM paths, 1-3 threads) against
// ref::MatMul. Tolerance: the exact bound of the 8-bit activation rounding
// (tables with integer dot products) plus F32 accumulation (2e-6 of
// sum |w x|).
TEST_P(QuantTypeTest, FastMatMulMatchesReferenceOnOddSizes) {
  const DType t = GetParam().type;
  std::mt19937 rng(13);
  for (const KernelSet* ks : AvailableKernelSets()) {
    ScopedKernels scoped(ks);
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      for (int64_t n_in : OddLengths(t)) {
        for (int64_t n_out : {1, 19}) {
          for (int64_t n_tok : {1, 2, 5, 7}) {
            const std::vector<float> wf = RandomFloats(rng, n_in * n_out);
            const std::vector<float> x = RandomFloats(rng, n_in * n_tok);
            std::vector<uint8_t> w(RowBytes(t, n_in) * n_out);
            for (int64_t o = 0; o < n_out; ++o) {
              QuantizeRow(t, wf.data() + o * n_in, n_in,
                          w.data() + o * RowBytes(t, n_in));
            }
            std::vector<float> y(n_out * n_tok, NAN), yr(n_out * n_tok);
            MatMul(&pool, t, w.data(), n_in, n_out, x.data(), n_tok, y.data());
            ref::MatMul(t, w.data(), n_in, n_out, x.data(), n_tok, yr.data());
            std::vector<float> row(n_in);
            for (int64_t o = 0; o < n_out; ++o) {
              ref::DequantizeRow(t, w.data() + o * RowBytes(t, n_in), n_in,
                                 row.data());
              for (int64_t k = 0; k < n_tok; ++k) {
                const float* xk = x.data() + k * n_in;
                double mag = 0.0;
                for (int64_t i = 0; i < n_in; ++i)
                  mag += std::fabs(row[i] * xk[i]);
                // Activation blocks as large as the weight blocks (AVX2
                // K-quant dots use one activation scale per 256).
                const double act =
                    ks->quant_gemv != nullptr
                        ? 1.001 *
                              ActQuantBound(row.data(), xk, n_in, BlockSize(t))
                        : 0.0;
                ASSERT_NEAR(y[k * n_out + o], yr[k * n_out + o],
                            act + 2e-6 * mag + 1e-6)
                    << ks->name << " " << DTypeName(t) << " n_in=" << n_in
                    << " n_out=" << n_out << " n_tok=" << n_tok;
              }
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantTypeTest, ::testing::ValuesIn(kTypes),
                         TypeName);

// The block types, each with a fused integer dot in both SIMD tables.
const DType kFusedTypes[] = {DType::kQ8_0, DType::kQ4_0,   DType::kQ4_1,
                             DType::kQ5_0, DType::kQ5_1,   DType::kQ2_K,
                             DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,
                             DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// Rows of raw random bytes (every bit pattern of quants and packed scales:
// Q6_K scales of -128, 6-bit q of 63, ...) with the F16 scale fields set to
// finite values in +-[0.001, 0.1].
std::vector<uint8_t> RandomBlockRows(DType t, int64_t n_rows, int64_t n_in,
                                     std::mt19937& rng) {
  std::vector<uint8_t> w(RowBytes(t, n_in) * n_rows);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  std::vector<size_t> scale_offsets;
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      scale_offsets = {0};
      break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      scale_offsets = {0, 2};
      break;
    case DType::kQ6_K:
      scale_offsets = {offsetof(BlockQ6_K, d)};
      break;
    case DType::kQ3_K:
      scale_offsets = {offsetof(BlockQ3_K, d)};
      break;
    case DType::kQ2_K:
      scale_offsets = {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
      break;
    default:
      ADD_FAILURE() << "no scale layout for " << DTypeName(t);
  }
  std::uniform_real_distribution<float> mag(0.001f, 0.1f);
  const int64_t bb = BlockBytes(t);
  for (size_t b = 0; b < w.size() / bb; ++b) {
    for (size_t off : scale_offsets) {
      const uint16_t h = F32ToF16(rng() % 2 ? mag(rng) : -mag(rng));
      std::memcpy(w.data() + b * bb + off, &h, 2);
    }
  }
  return w;
}

// The fused AVX2 dots (kFusedTypes) on the extremes of their integer
// ranges: raw random blocks against activations of +-1 (every
// 8-bit activation is +-127 and exact, so the only error is F32 rounding:
// an int16/int32 overflow would be off by far more) and against random
// activations (bound: the 8-bit rounding of a 256-element block).
TEST(FusedDotTest, RawRandomBlocksMatchReference) {
  std::mt19937 rng(15);
  for (const KernelSet* ks : AvailableKernelSets()) {
    ScopedKernels scoped(ks);
    for (DType t : kFusedTypes) {
      const int64_t n_in = BlockSize(t) == 32 ? 800 : 1280, n_out = 7;
      const std::vector<uint8_t> w = RandomBlockRows(t, n_out, n_in, rng);
      std::vector<float> x(n_in * 2);
      for (int64_t i = 0; i < n_in; ++i) x[i] = rng() % 2 ? 1.0f : -1.0f;
      const std::vector<float> xr = RandomFloats(rng, n_in, -4.0f, 3.0f);
      std::copy(xr.begin(), xr.end(), x.begin() + n_in);
      std::vector<float> y(n_out * 2), yr(n_out * 2), row(n_in);
      MatMul(nullptr, t, w.data(), n_in, n_out, x.data(), 2, y.data());
      ref::MatMul(t, w.data(), n_in, n_out, x.data(), 2, yr.data());
      for (int64_t o = 0; o < n_out; ++o) {
        ref::DequantizeRow(t, w.data() + o * RowBytes(t, n_in), n_in,
                           row.data());
        for (int k = 0; k < 2; ++k) {
          const float* xk = x.data() + k * n_in;
          double mag = 0.0;
          for (int64_t i = 0; i < n_in; ++i) mag += std::fabs(row[i] * xk[i]);
          const double act =
              ks->quant_gemv != nullptr && k == 1
                  ? 1.001 * ActQuantBound(row.data(), xk, n_in, BlockSize(t))
                  : 0.0;
          ASSERT_NEAR(y[k * n_out + o], yr[k * n_out + o],
                      act + 4e-6 * mag + 1e-6)
              << ks->name << " " << DTypeName(t) << " o=" << o << " k=" << k;
        }
      }
    }
  }
}

// x' of the activation form the AVX2 fused dot of type t reads
// (quant_kernels.h): the block form for 32-element blocks, the super-block
// form for 256-element ones.
std::vector<double> DequantizedActs(DType t, const QuantizedActs& a) {
  std::vector<double> x(a.n);
  for (int64_t i = 0; i < a.n; ++i) {
    x[i] = BlockSize(t) == 32
               ? static_cast<double>(a.d[i / 32]) * a.q[i]
               : static_cast<double>(a.dk[i / kSuperAct]) * a.qk[i];
  }
  return x;
}

// Every table's quant_gemv on odd row counts, several tokens (ldy > n_rows)
// and row lengths that are multiples of the block size (for 32-element
// blocks also ones that are not multiples of 256): against the float64 dot
// of the dequantised weights with x, within the 8-bit activation bound
// (ActQuantBound over the weight's block) plus F32 accumulation. The AVX2
// table routes every type here to its fused dot and is also checked against
// the dequantised activations x' it reads, where the only error is F32
// rounding (1e-5 of sum |x'| * max|w| of the block: Q4_1/Q5_1 sum d * q and
// m separately, each at most twice the block's largest |w|).
//
// Seven tokens: the dots that unpack a block once for several tokens
// (AVX-512 K-quants) run a group of four, a pair and a single token; each
// token's result must be the bits of a call with that token alone.
TEST(FusedDotTest, QuantGemvMatchesReferenceDot) {
  std::mt19937 rng(17);
  constexpr int kTok = 7;
  for (const KernelSet* ks : AvailableKernelSets()) {
    if (ks->quant_gemv == nullptr) continue;
    ScopedKernels scoped(ks);
    // Both SIMD tables route every type here to a fused dot: AVX-512 with
    // VNNI to its own for the types it has, else to AVX2's.
    const bool fused = ks == Avx2Kernels() || ks == Avx512Kernels();
    for (DType t : kFusedTypes) {
      if (fused) {
        const bool vnni = ks == Avx512Kernels() && GetCpuFeatures().avx512_vnni;
        EXPECT_STREQ(QuantDotPath(t), vnni ? "int8 dot, fused blocks (VNNI)"
                                           : "int8 dot, fused blocks")
            << ks->name << " " << DTypeName(t);
      }
      const std::vector<int64_t> lengths =
          BlockSize(t) == 32 ? std::vector<int64_t>{32, 96, 288, 800, 1024}
                             : std::vector<int64_t>{256, 768, 1280};
      for (int64_t n_in : lengths) {
        for (int64_t n_rows : {1, 7, 19}) {
          const int64_t rb = RowBytes(t, n_in), ldy = n_rows + 2;
          const std::vector<float> wf =
              RandomFloats(rng, n_in * n_rows, -2.0f, 1.5f);
          std::vector<uint8_t> w(rb * n_rows);
          for (int64_t r = 0; r < n_rows; ++r) {
            QuantizeRow(t, wf.data() + r * n_in, n_in, w.data() + r * rb);
          }
          const std::vector<float> x =
              RandomFloats(rng, n_in * kTok, -3.0f, 4.0f);
          QuantizedActs acts[kTok];
          for (int k = 0; k < kTok; ++k) {
            QuantizeActs(x.data() + k * n_in, n_in, &acts[k]);
          }
          std::vector<float> y(ldy * kTok, NAN), row(n_in);
          ks->quant_gemv(t, w.data(), rb, n_rows, n_in, acts, kTok, y.data(),
                         ldy);
          for (int k = 0; k < kTok; ++k) {
            std::vector<float> alone(n_rows);
            ks->quant_gemv(t, w.data(), rb, n_rows, n_in, &acts[k], 1,
                           alone.data(), n_rows);
            for (int64_t r = 0; r < n_rows; ++r) {
              ASSERT_EQ(y[k * ldy + r], alone[r])
                  << ks->name << " " << DTypeName(t) << " token " << k
                  << " of " << kTok << " differs from the token alone";
            }
          }
          for (int64_t r = 0; r < n_rows; ++r) {
            ref::DequantizeRow(t, w.data() + r * rb, n_in, row.data());
            for (int k = 0; k < kTok; ++k) {
              const float* xk = x.data() + k * n_in;
              const std::vector<double> xq = DequantizedActs(t, acts[k]);
              double want = 0.0, want_q = 0.0, mag = 0.0, mag_q = 0.0;
              for (int64_t i = 0; i < n_in; ++i) {
                want += static_cast<double>(row[i]) * xk[i];
                want_q += row[i] * xq[i];
                mag += std::fabs(row[i] * xk[i]);
              }
              const int64_t bs = BlockSize(t);
              for (int64_t b = 0; b < n_in / bs; ++b) {
                float wmax = 0.0f;
                for (int64_t i = b * bs; i < (b + 1) * bs; ++i)
                  wmax = std::max(wmax, std::fabs(row[i]));
                for (int64_t i = b * bs; i < (b + 1) * bs; ++i)
                  mag_q += wmax * std::fabs(xq[i]);
              }
              const float got = y[k * ldy + r];
              const std::string where =
                  std::string(ks->name) + " " + DTypeName(t) +
                  " n_in=" + std::to_string(n_in) +
                  " n_rows=" + std::to_string(n_rows) +
                  " r=" + std::to_string(r) + " k=" + std::to_string(k);
              ASSERT_NEAR(got, want,
                          1.001 * ActQuantBound(row.data(), xk, n_in, bs) +
                              4e-6 * mag + 1e-6)
                  << where;
              if (fused) {
                ASSERT_NEAR(got, want_q, 1e-5 * mag_q + 1e-6) << where;
              }
            }
          }
          for (int k = 0; k < kTok; ++k) {
            for (int64_t r = n_rows; r < ldy; ++r) {
              ASSERT_TRUE(std::isnan(y[k * ldy + r])) << "wrote past n_rows";
            }
          }
        }
      }
    }
  }
}

TEST(QuantizeActsTest, SuperBlockFormBoundsTheRoundingError) {
  std::mt19937 rng(16);
  const std::vector<float> x = RandomFloats(rng, 512, -5.0f, 5.0f);
  QuantizedActs a;
  QuantizeActs(x.data(), 512, &a);
  ASSERT_EQ(a.qk.size(), 512u);
  ASSERT_EQ(a.dk.size(), 2u);
  ASSERT_EQ(a.sumk16.size(), 32u);
  for (int b = 0; b < 2; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 256; ++i)
      amax = std::max(amax, std::fabs(x[256 * b + i]));
    EXPECT_FLOAT_EQ(a.dk[b], amax / 127.0f);
  }
  for (int i = 0; i < 512; ++i) {
    EXPECT_LE(std::fabs(a.dk[i / 256] * a.qk[i] - x[i]),
              a.dk[i / 256] / 2 * 1.0001);
  }
  for (int g = 0; g < 32; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += a.qk[16 * g + j];
    EXPECT_EQ(a.sumk16[g], s);
  }
  // Not a multiple of 256: no super-block form (and no stale one).
  QuantizeActs(x.data(), 96, &a);
  EXPECT_TRUE(a.qk.empty());
  EXPECT_TRUE(a.dk.empty());
  EXPECT_TRUE(a.sumk16.empty());
}

// Every table's quantize_acts gives QuantizeActs' bits in the forms asked
// for, on lengths with and without a super-block form, reusing one output
// (stale contents must not survive), with exact ties (a block whose largest
// |x| is 127 has d = 1, so x = 2.5 must round to 2, -3.5 to -4: checked
// where the rest of the block is within [-1, 1]), zero
// blocks (d = 0) and magnitudes from 1e-6 to 1e4.
TEST(QuantizeActsTest, EveryTableMatchesTheReferenceBitForBit) {
  std::mt19937 rng(23);
  int tables = 0;
  for (const KernelSet* ks : AvailableKernelSets()) {
    if (ks->quantize_acts == nullptr) continue;
    ++tables;
    QuantizedActs got;
    for (int64_t n : {32, 96, 256, 544, 2048, 8448}) {
      for (float scale : {1e-6f, 1.0f, 1e4f}) {
        std::vector<float> x = RandomFloats(rng, n, -scale, scale);
        std::fill(x.begin(), x.begin() + 32, 0.0f);  // a zero block
        if (n >= 64) {
          x[32] = 127.0f;
          x[33] = 2.5f;
          x[34] = -3.5f;
          x[35] = 0.5f;
        }
        for (ActForms forms :
             {ActForms::kBoth, ActForms::kBlock, ActForms::kSuper}) {
          QuantizedActs want;
          QuantizeActs(x.data(), n, &want, forms);
          ks->quantize_acts(x.data(), n, &got, forms);
          const std::string where = std::string(ks->name) + " n=" +
                                    std::to_string(n) + " scale=" +
                                    std::to_string(scale) + " forms=" +
                                    std::to_string(static_cast<int>(forms));
          EXPECT_EQ(got.n, n) << where;
          if (forms != ActForms::kSuper) {
            EXPECT_EQ(got.q, want.q) << where;
            EXPECT_EQ(got.d, want.d) << where;
            EXPECT_EQ(got.sum16, want.sum16) << where;
          }
          if (forms != ActForms::kBlock) {
            EXPECT_EQ(got.qk, want.qk) << where;
            EXPECT_EQ(got.dk, want.dk) << where;
            EXPECT_EQ(got.sumk16, want.sumk16) << where;
          }
          if (n >= 64 && scale <= 1.0f && forms != ActForms::kSuper) {
            EXPECT_EQ(got.q[33], 2) << where;
            EXPECT_EQ(got.q[34], -4) << where;
            EXPECT_EQ(got.q[35], 0) << where;
          }
        }
      }
    }
  }
  // The scalar table has none; any SIMD table on this CPU must.
  if (AvailableKernelSets().size() > 1) {
    EXPECT_GT(tables, 0);
  }
}

TEST(QuantizeActsTest, PadsAndBoundsTheRoundingError) {
  std::mt19937 rng(14);
  const std::vector<float> x = RandomFloats(rng, 96, -5.0f, 5.0f);
  QuantizedActs a;
  QuantizeActs(x.data(), 96, &a);
  ASSERT_EQ(a.q.size(), 256u);
  ASSERT_EQ(a.d.size(), 8u);
  ASSERT_EQ(a.sum16.size(), 16u);
  for (int i = 0; i < 96; ++i) {
    EXPECT_LE(std::fabs(a.d[i / 32] * a.q[i] - x[i]), a.d[i / 32] / 2 * 1.0001);
  }
  for (int i = 96; i < 256; ++i) EXPECT_EQ(a.q[i], 0);
  for (int g = 0; g < 6; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += a.q[16 * g + j];
    EXPECT_EQ(a.sum16[g], s);
  }
}

}  // namespace
}  // namespace ckv::kernels::cpu
