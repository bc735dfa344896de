// BF16 attention tile forms of the avx512_bf16 table (prefill items): the
// F32 tiles of load_kt / load_v are paired into BF16 words, and Q.K^T and
// P.V run on vdpbf16ps (two products per F32 lane per instruction). Scores,
// the online softmax and the output accumulators stay F32. Used only on
// CPUs with AVX-512 F/BW/VL and AVX512_BF16.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu::avx512bf16 {
namespace {

inline __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh&>(v); }

inline __m512i Bf16Words(__m512 v) {
  const __m256bh h = _mm512_cvtneps_pbh(v);
  return _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(h));
}

// R query rows x 64 keys: 4 accumulators a row.
template <int R>
void QkRows(const uint32_t* q2, int ldq2, const uint32_t* kt2, int n_pairs,
            float* s) {
  __m512 acc[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int p = 0; p < n_pairs; ++p) {
    const uint32_t* kr = kt2 + p * kTileK;
    const __m512bh k0 = AsBh(_mm512_loadu_si512(kr));
    const __m512bh k1 = AsBh(_mm512_loadu_si512(kr + 16));
    const __m512bh k2 = AsBh(_mm512_loadu_si512(kr + 32));
    const __m512bh k3 = AsBh(_mm512_loadu_si512(kr + 48));
    for (int i = 0; i < R; ++i) {
      const __m512bh b =
          AsBh(_mm512_set1_epi32(static_cast<int>(q2[i * ldq2 + p])));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], b, k0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], b, k1);
      acc[i][2] = _mm512_dpbf16_ps(acc[i][2], b, k2);
      acc[i][3] = _mm512_dpbf16_ps(acc[i][3], b, k3);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) {
      _mm512_storeu_ps(s + i * kTileK + 16 * v, acc[i][v]);
    }
  }
}

// Rows i < R, dims [0, 16 * NV) of o; p2 holds each row's probability
// pairs (kTileK / 2 words a row).
template <int R, int NV>
void PvBlock(const uint32_t* p2, const uint32_t* vt2, int n_pairs, int ldv,
             const float* alpha, float* o) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) {
      acc[i][v] = _mm512_mul_ps(a, _mm512_loadu_ps(o + i * ldv + 16 * v));
    }
  }
  for (int p = 0; p < n_pairs; ++p) {
    __m512bh vv[NV];
    for (int v = 0; v < NV; ++v) {
      vv[v] = AsBh(_mm512_loadu_si512(vt2 + p * ldv + 16 * v));
    }
    for (int i = 0; i < R; ++i) {
      const __m512bh b =
          AsBh(_mm512_set1_epi32(static_cast<int>(p2[i * (kTileK / 2) + p])));
      for (int v = 0; v < NV; ++v) {
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], b, vv[v]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < NV; ++v) {
      _mm512_storeu_ps(o + i * ldv + 16 * v, acc[i][v]);
    }
  }
}

template <int R>
void PvRows(const uint32_t* p2, const uint32_t* vt2, int n_pairs, int ldv,
            const float* alpha, float* o) {
  int d = 0;
  for (; d + 64 <= ldv; d += 64) {
    PvBlock<R, 4>(p2, vt2 + d, n_pairs, ldv, alpha, o + d);
  }
  switch ((ldv - d) / 16) {
    case 3:
      PvBlock<R, 3>(p2, vt2 + d, n_pairs, ldv, alpha, o + d);
      break;
    case 2:
      PvBlock<R, 2>(p2, vt2 + d, n_pairs, ldv, alpha, o + d);
      break;
    case 1:
      PvBlock<R, 1>(p2, vt2 + d, n_pairs, ldv, alpha, o + d);
      break;
    default:
      break;
  }
}

}  // namespace

void PairRows(const float* a, const float* b, int n, uint32_t* dst) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i lo = Bf16Words(_mm512_loadu_ps(a + i));
    const __m512i hi = Bf16Words(_mm512_loadu_ps(b + i));
    _mm512_storeu_si512(dst + i,
                        _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512i lo = Bf16Words(_mm512_maskz_loadu_ps(m, a + i));
    const __m512i hi = Bf16Words(_mm512_maskz_loadu_ps(m, b + i));
    _mm512_mask_storeu_epi32(dst + i, m,
                             _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

void QkBf16(const uint32_t* q2, int ldq2, int rows, const uint32_t* kt2,
            int n_pairs, float* s) {
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    QkRows<4>(q2 + i * ldq2, ldq2, kt2, n_pairs, s + i * kTileK);
  }
  for (; i < rows; ++i)
    QkRows<1>(q2 + i * ldq2, ldq2, kt2, n_pairs, s + i * kTileK);
}

void PvBf16(const float* p, int rows, const uint32_t* vt2, int n, int ldv,
            const float* alpha, float* o) {
  alignas(64) uint32_t p2[4 * (kTileK / 2)];
  const int n_pairs = (n + 1) / 2;
  for (int i = 0; i < rows; i += 4) {
    const int r = std::min(4, rows - i);
    for (int k = 0; k < r; ++k) {
      ToPairs(p + (i + k) * kTileK, 2 * n_pairs, p2 + k * (kTileK / 2));
    }
    if (r == 4) {
      PvRows<4>(p2, vt2, n_pairs, ldv, alpha + i, o + i * ldv);
      continue;
    }
    for (int k = 0; k < r; ++k) {
      PvRows<1>(p2 + k * (kTileK / 2), vt2, n_pairs, ldv, alpha + i + k,
                o + (i + k) * ldv);
    }
  }
}

}  // namespace ckv::kernels::cpu::avx512bf16
