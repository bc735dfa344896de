// AVX2/FMA/F16C primitives of the flash-attention driver (attention.cc) and
// SwiGLU: key tile transpose-convert, Q.K^T tile, online softmax row, P.V
// accumulate. Same contracts as KernelSet (kernel_set.h); built with
// -mavx2 -mfma -mf16c and used only when GetCpuFeatures() reports them.
#include "kernels/cpu/kernels_avx2_attn.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu::avx2 {
namespace {

using avx2util::Element;
using avx2util::Load8;
using avx2util::Sum8;

static_assert(kTileK == 64, "qk/softmax assume 8 vectors per key tile");

// Row j of a tile: base + i * row_bytes, i = rows[j] (gather) or j.
inline const char* RowPtr(const char* base, int64_t row_bytes,
                          const int32_t* rows, int j) {
  return base + (rows != nullptr ? int64_t{rows[j]} : int64_t{j}) * row_bytes;
}

// In-place transpose of 8 vectors (rows) into 8 vectors (columns).
inline void Transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3
    u[4 * g + 0] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xee);
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// exp(x) per lane: 2^n * p(r), x = n ln2 + r, |r| <= ln2 / 2, degree-7
// Taylor polynomial (relative error ~2e-7); 0 below -104 (and for -inf),
// clamped at 88.7 above.
inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-104.0f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.7f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n in two halves so that n down to -150 stays representable (a
  // subnormal result) and n up to 128 does not overflow the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i rest = _mm256_sub_epi32(ni, half);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// All-ones lanes where bit j of `bits` (8 bits) is set.
inline __m256 LaneMask(uint32_t bits) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i b = _mm256_and_si256(_mm256_set1_epi32(bits), sel);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, sel));
}

// kt columns [j0, j0 + 8) for dims [d0, d0 + 8) from `rows` (< 8 zero-fills)
// rows starting at tile row j0.
template <DType T>
void KtBlock8(const char* base, int64_t row_bytes, const int32_t* idx, int j0,
              int rows, int d0, float* kt) {
  __m256 r[8];
  for (int j = 0; j < 8; ++j) {
    r[j] = j < rows ? Load8<T>(RowPtr(base, row_bytes, idx, j0 + j), d0)
                    : _mm256_setzero_ps();
  }
  Transpose8(r);
  for (int d = 0; d < 8; ++d)
    _mm256_storeu_ps(kt + (d0 + d) * kTileK + j0, r[d]);
}

template <DType T>
void LoadKtT(const void* k, int64_t stride, const int32_t* idx, int n, int hd,
             float* kt) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(k);
  const int hd8 = hd / 8 * 8;
  for (int j0 = 0; j0 < kTileK; j0 += 8) {
    const int rows = std::clamp(n - j0, 0, 8);
    for (int d0 = 0; d0 < hd8; d0 += 8) {
      if (rows == 0) {
        for (int d = d0; d < d0 + 8; ++d) {
          _mm256_storeu_ps(kt + d * kTileK + j0, _mm256_setzero_ps());
        }
      } else {
        KtBlock8<T>(base, row_bytes, idx, j0, rows, d0, kt);
      }
    }
    for (int d = hd8; d < hd; ++d) {  // dims past the last full 8
      for (int j = 0; j < 8; ++j) {
        kt[d * kTileK + j0 + j] =
            j < rows ? Element<T>(RowPtr(base, row_bytes, idx, j0 + j), d)
                     : 0.0f;
      }
    }
  }
}

template <DType T>
void LoadVT(const void* v, int64_t stride, const int32_t* idx, int n, int hd,
            int ldv, float* vt) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(v);
  const int hd8 = hd / 8 * 8;
  for (int j = 0; j < kTileK; ++j) {
    float* dst = vt + j * ldv;
    if (j >= n) {
      for (int d = 0; d < ldv; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_setzero_ps());
      continue;
    }
    const char* row = RowPtr(base, row_bytes, idx, j);
    int d = 0;
    for (; d < hd8; d += 8) _mm256_storeu_ps(dst + d, Load8<T>(row, d));
    for (; d < hd; ++d) dst[d] = Element<T>(row, d);
    for (; d < ldv; ++d) dst[d] = 0.0f;
  }
}

// s rows [0, R) x keys [k0, k0 + 32).
template <int R>
void QkRows(const float* q, int ldq, const float* kt, int hd, int k0,
            float* s) {
  __m256 acc[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  for (int d = 0; d < hd; ++d) {
    const float* kr = kt + d * kTileK + k0;
    const __m256 k0v = _mm256_loadu_ps(kr), k1v = _mm256_loadu_ps(kr + 8);
    const __m256 k2v = _mm256_loadu_ps(kr + 16), k3v = _mm256_loadu_ps(kr + 24);
    for (int i = 0; i < R; ++i) {
      const __m256 b = _mm256_broadcast_ss(q + i * ldq + d);
      acc[i][0] = _mm256_fmadd_ps(b, k0v, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(b, k1v, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(b, k2v, acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(b, k3v, acc[i][3]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) {
      _mm256_storeu_ps(s + i * kTileK + k0 + 8 * v, acc[i][v]);
    }
  }
}

// Scores of 4 keys (rows r0..r0+3 of the tile, all < n) for R <= 2 query
// rows, converted in registers.
template <DType T, int R>
inline void QkFourKeysDirect(const char* const kp[4], int hd, const float* q,
                             int ldq, float* s) {
  __m256 acc[R][4];
  for (int i = 0; i < R; ++i) {
    for (int k = 0; k < 4; ++k) acc[i][k] = _mm256_setzero_ps();
  }
  for (int d = 0; d < hd; d += 8) {
    __m256 kv[4];
    for (int k = 0; k < 4; ++k) kv[k] = Load8<T>(kp[k], d);
    for (int i = 0; i < R; ++i) {
      const __m256 qv = _mm256_loadu_ps(q + i * ldq + d);
      for (int k = 0; k < 4; ++k) {
        acc[i][k] = _mm256_fmadd_ps(qv, kv[k], acc[i][k]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    const __m256 h01 = _mm256_hadd_ps(acc[i][0], acc[i][1]);
    const __m256 h23 = _mm256_hadd_ps(acc[i][2], acc[i][3]);
    const __m256 x = _mm256_hadd_ps(h01, h23);
    _mm_storeu_ps(s + i * kTileK, _mm_add_ps(_mm256_castps256_ps128(x),
                                             _mm256_extractf128_ps(x, 1)));
  }
}

template <DType T, int R>
void QkDirectRows(const char* base, int64_t row_bytes, const int32_t* idx,
                  int n, int hd, const float* q, int ldq, float* s) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const char* kp[4];
    for (int k = 0; k < 4; ++k) kp[k] = RowPtr(base, row_bytes, idx, j + k);
    QkFourKeysDirect<T, R>(kp, hd, q, ldq, s + j);
  }
  for (; j < n; ++j) {  // last keys one by one
    const char* row = RowPtr(base, row_bytes, idx, j);
    for (int i = 0; i < R; ++i) {
      __m256 acc = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i * ldq + d),
                              Load8<T>(row, d), acc);
      }
      s[i * kTileK + j] = Sum8(acc);
    }
  }
}

template <DType T>
void QkDirectT(const void* k, int64_t stride, const int32_t* idx, int n, int hd,
               const float* q, int ldq, int rows, float* s) {
  const char* base = static_cast<const char*>(k);
  const int64_t row_bytes = RowBytes(T, stride);
  int i = 0;
  for (; i + 2 <= rows; i += 2) {
    QkDirectRows<T, 2>(base, row_bytes, idx, n, hd, q + i * ldq, ldq,
                       s + i * kTileK);
  }
  if (i < rows) {
    QkDirectRows<T, 1>(base, row_bytes, idx, n, hd, q + i * ldq, ldq,
                       s + i * kTileK);
  }
}

// o rows [0, R) dims [d0, d0 + 8 * NV) += p . V, V converted in registers.
template <DType T, int R, int NV>
void PvDirectBlock(const char* base, int64_t row_bytes, const int32_t* idx,
                   int n, int d0, const float* p, const float* alpha, float* o,
                   int ldo) {
  __m256 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    const __m256 a = _mm256_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) {
      acc[i][v] = _mm256_mul_ps(a, _mm256_loadu_ps(o + i * ldo + d0 + 8 * v));
    }
  }
  for (int j = 0; j < n; ++j) {
    const char* row = RowPtr(base, row_bytes, idx, j);
    __m256 vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = Load8<T>(row, d0 + 8 * v);
    for (int i = 0; i < R; ++i) {
      const __m256 b = _mm256_broadcast_ss(p + i * kTileK + j);
      for (int v = 0; v < NV; ++v) {
        acc[i][v] = _mm256_fmadd_ps(b, vv[v], acc[i][v]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < NV; ++v) {
      _mm256_storeu_ps(o + i * ldo + d0 + 8 * v, acc[i][v]);
    }
  }
}

template <DType T, int NV>
void PvDirectChunk(const char* base, int64_t row_bytes, const int32_t* idx,
                   int n, int d0, const float* p, int rows, const float* alpha,
                   float* o, int ldo) {
  int i = 0;
  for (; i + 2 <= rows; i += 2) {
    PvDirectBlock<T, 2, NV>(base, row_bytes, idx, n, d0, p + i * kTileK,
                            alpha + i, o + i * ldo, ldo);
  }
  if (i < rows) {
    PvDirectBlock<T, 1, NV>(base, row_bytes, idx, n, d0, p + i * kTileK,
                            alpha + i, o + i * ldo, ldo);
  }
}

template <DType T>
void PvDirectT(const void* v, int64_t stride, const int32_t* idx, int n, int hd,
               const float* p, int rows, const float* alpha, float* o,
               int ldo) {
  const char* base = static_cast<const char*>(v);
  const int64_t row_bytes = RowBytes(T, stride);
  int d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) {
    PvDirectChunk<T, 4>(base, row_bytes, idx, n, d0, p, rows, alpha, o, ldo);
  }
  switch ((hd - d0) / 8) {
    case 3:
      return PvDirectChunk<T, 3>(base, row_bytes, idx, n, d0, p, rows, alpha, o,
                                 ldo);
    case 2:
      return PvDirectChunk<T, 2>(base, row_bytes, idx, n, d0, p, rows, alpha, o,
                                 ldo);
    case 1:
      return PvDirectChunk<T, 1>(base, row_bytes, idx, n, d0, p, rows, alpha, o,
                                 ldo);
    default:
      return;
  }
}

}  // namespace

void LoadKt(DType t, const void* k, int64_t stride, const int32_t* rows, int n,
            int hd, float* kt) {
  switch (t) {
    case DType::kF16:
      return LoadKtT<DType::kF16>(k, stride, rows, n, hd, kt);
    case DType::kBF16:
      return LoadKtT<DType::kBF16>(k, stride, rows, n, hd, kt);
    default:
      return LoadKtT<DType::kF32>(k, stride, rows, n, hd, kt);
  }
}

void LoadV(DType t, const void* v, int64_t stride, const int32_t* rows, int n,
           int hd, int ldv, float* vt) {
  switch (t) {
    case DType::kF16:
      return LoadVT<DType::kF16>(v, stride, rows, n, hd, ldv, vt);
    case DType::kBF16:
      return LoadVT<DType::kBF16>(v, stride, rows, n, hd, ldv, vt);
    default:
      return LoadVT<DType::kF32>(v, stride, rows, n, hd, ldv, vt);
  }
}

void Qk(const float* q, int ldq, int rows, const float* kt, int hd, float* s) {
  for (int k0 = 0; k0 < kTileK; k0 += 32) {
    int i = 0;
    for (; i + 2 <= rows; i += 2) {
      QkRows<2>(q + i * ldq, ldq, kt, hd, k0, s + i * kTileK);
    }
    if (i < rows) QkRows<1>(q + i * ldq, ldq, kt, hd, k0, s + i * kTileK);
  }
}

// The row-major tile is rows of F32: the direct kernel reads it in place.
void QkRowMajor(const float* q, int ldq, int rows, const float* kr, int ldk,
                int n, float* s) {
  QkDirectT<DType::kF32>(kr, ldk, nullptr, n, ldk, q, ldq, rows, s);
}

void QkDirect(DType t, const void* k, int64_t stride, const int32_t* idx, int n,
              int hd, const float* q, int ldq, int rows, float* s) {
  switch (t) {
    case DType::kF16:
      return QkDirectT<DType::kF16>(k, stride, idx, n, hd, q, ldq, rows, s);
    case DType::kBF16:
      return QkDirectT<DType::kBF16>(k, stride, idx, n, hd, q, ldq, rows, s);
    default:
      return QkDirectT<DType::kF32>(k, stride, idx, n, hd, q, ldq, rows, s);
  }
}

void PvDirect(DType t, const void* v, int64_t stride, const int32_t* idx, int n,
              int hd, const float* p, int rows, const float* alpha, float* o,
              int ldo) {
  switch (t) {
    case DType::kF16:
      return PvDirectT<DType::kF16>(v, stride, idx, n, hd, p, rows, alpha, o,
                                    ldo);
    case DType::kBF16:
      return PvDirectT<DType::kBF16>(v, stride, idx, n, hd, p, rows, alpha, o,
                                     ldo);
    default:
      return PvDirectT<DType::kF32>(v, stride, idx, n, hd, p, rows, alpha, o,
                                    ldo);
  }
}

float SoftmaxRow(float* s, uint64_t valid, float* m, float* l) {
  if (valid == 0) {
    for (int v = 0; v < 8; ++v)
      _mm256_storeu_ps(s + 8 * v, _mm256_setzero_ps());
    return 1.0f;
  }
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 mk[8], sv[8];
  __m256 mx = ninf;
  for (int v = 0; v < 8; ++v) {
    mk[v] = LaneMask(static_cast<uint32_t>(valid >> (8 * v)) & 0xff);
    sv[v] = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + 8 * v), mk[v]);
    mx = _mm256_max_ps(mx, sv[v]);
  }
  const float m_new = std::max(*m, HorizontalMax(mx));
  const float alpha = std::exp(*m - m_new);  // exp(-inf) = 0 on first tile
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  for (int v = 0; v < 8; ++v) {
    const __m256 p = _mm256_and_ps(mk[v], Exp(_mm256_sub_ps(sv[v], mv)));
    sum = _mm256_add_ps(sum, p);
    _mm256_storeu_ps(s + 8 * v, p);
  }
  *m = m_new;
  *l = *l * alpha + Sum8(sum);
  return alpha;
}

// The V tile is rows of F32 (zero past hd up to ldv): the direct kernel
// reads it in place.
void Pv(const float* p, int rows, const float* vt, int n, int ldv,
        const float* alpha, float* o) {
  PvDirectT<DType::kF32>(vt, ldv, nullptr, n, ldv, p, rows, alpha, o, ldv);
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 sig = _mm256_div_ps(
        one, _mm256_add_ps(one, Exp(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace ckv::kernels::cpu::avx2
