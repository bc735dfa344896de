// The AVX512_BF16 table: the AVX-512 table plus a prefill GEMM on BF16
// operands (vdpbf16ps: two BF16 products per F32 lane per instruction, twice
// the multiply-adds of an F32 FMA). Weights and activations are rounded to
// BF16 (nearest even) once when packed; every product is exact in F32 and
// the sums are F32. Used only on CPUs with AVX-512 F/BW/VL and AVX512_BF16.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu {
namespace avx512bf16 {
namespace {

static_assert(kBf16Rows == 32 && kBf16Cols == 12);

// dst[p * width + j] = pairs of row j, for j < n_rows; zeros for
// n_rows <= j < width.
void Interleave(const float* const* rows, int n_rows, int width, int64_t n_in,
                uint32_t* dst) {
  const int64_t pairs = (n_in + 1) / 2;
  thread_local std::vector<uint32_t> scratch;
  if (static_cast<int64_t>(scratch.size()) < pairs) scratch.resize(pairs);
  for (int j = 0; j < width; ++j) {
    if (j >= n_rows) {
      for (int64_t p = 0; p < pairs; ++p) dst[p * width + j] = 0;
      continue;
    }
    ToPairs(rows[j], n_in, scratch.data());
    for (int64_t p = 0; p < pairs; ++p) dst[p * width + j] = scratch[p];
  }
}

void PackRows(const float* const* rows, int64_t n_in, uint32_t* dst) {
  Interleave(rows, kBf16Rows, kBf16Rows, n_in, dst);
}

void PackCols(const float* x, int64_t n_in, int nc, uint32_t* dst) {
  const float* rows[kBf16Cols];
  for (int c = 0; c < nc; ++c) rows[c] = x + c * n_in;
  Interleave(rows, nc, kBf16Cols, n_in, dst);
}

inline __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

inline __mmask16 RowMask(int n) {
  if (n <= 0) return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : static_cast<__mmask16>((1u << n) - 1u);
}

// 32 rows (two vectors of 16) x 12 columns: 24 accumulators.
void Tile(const uint32_t* w, const uint32_t* x, int64_t n_pairs, float* y,
          int64_t ldy, int nr, int nc) {
  __m512 acc[2][kBf16Cols];
  for (int c = 0; c < kBf16Cols; ++c) {
    acc[0][c] = _mm512_setzero_ps();
    acc[1][c] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < n_pairs; ++p) {
    const __m512bh w0 = AsBh(_mm512_loadu_si512(w + p * kBf16Rows));
    const __m512bh w1 = AsBh(_mm512_loadu_si512(w + p * kBf16Rows + 16));
    const uint32_t* xp = x + p * kBf16Cols;
#pragma GCC unroll 12
    for (int c = 0; c < kBf16Cols; ++c) {
      const __m512bh b = AsBh(_mm512_set1_epi32(static_cast<int>(xp[c])));
      acc[0][c] = _mm512_dpbf16_ps(acc[0][c], w0, b);
      acc[1][c] = _mm512_dpbf16_ps(acc[1][c], w1, b);
    }
  }
  const __mmask16 m0 = RowMask(nr);
  const __mmask16 m1 = RowMask(nr - 16);
  for (int c = 0; c < nc; ++c) {
    _mm512_mask_storeu_ps(y + c * ldy, m0, acc[0][c]);
    _mm512_mask_storeu_ps(y + c * ldy + 16, m1, acc[1][c]);
  }
}

}  // namespace

// The BF16 pairs of n floats of src as n / 2 (rounded up) 32-bit words,
// element 2p in the low half of word p, a zero high half past n.
void ToPairs(const float* src, int64_t n, uint32_t* dst) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i);
    const __m512 hi = _mm512_loadu_ps(src + i + 16);
    // cvtne2ps_pbh(a, b): b's elements in the low half, a's in the high.
    const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(dst + i / 2, reinterpret_cast<const __m512i&>(v));
  }
  for (; i < n; i += 16) {
    const int64_t left = std::min<int64_t>(16, n - i);
    const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    const int words = static_cast<int>((left + 1) / 2);
    const __mmask8 wm = static_cast<__mmask8>((1u << words) - 1u);
    _mm256_mask_storeu_epi32(dst + i / 2, wm,
                             reinterpret_cast<const __m256i&>(v));
  }
}

}  // namespace avx512bf16

const KernelSet* Avx512Bf16Kernels() {
  static const KernelSet ks = [] {
    KernelSet k = *Avx512Kernels();
    k.name = "avx512_bf16";
    k.pack_bf16_rows = avx512bf16::PackRows;
    k.pack_bf16_cols = avx512bf16::PackCols;
    k.gemm_bf16_tile = avx512bf16::Tile;
    k.to_pairs_bf16 = avx512bf16::ToPairs;
    k.pair_rows_bf16 = avx512bf16::PairRows;
    k.qk_bf16 = avx512bf16::QkBf16;
    k.pv_bf16 = avx512bf16::PvBf16;
    // Its BF16 GEMM beats the integer dots' prefill (gemm_bench, Zen 4, 1
    // thread, Q4_K 256 tokens: about 170 vs 116 GFLOP/s).
    k.quant_gemv_batches = nullptr;
    return k;
  }();
  return &ks;
}

}  // namespace ckv::kernels::cpu
