// AVX-512 primitives of the flash-attention driver (attention.cc): key tile
// transpose-convert, Q.K^T tile, online softmax row, P.V accumulate. Same
// contracts as KernelSet (kernel_set.h).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/avx512_util.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu::avx512 {
namespace {

static_assert(kTileK == 64, "qk/softmax assume 4 vectors per key tile");

// Row j of a tile: k + i * row_bytes, i = rows[j] (gather) or j.
inline const char* RowPtr(const char* k, int64_t row_bytes, const int32_t* rows,
                          int j) {
  return k + (rows != nullptr ? int64_t{rows[j]} : int64_t{j}) * row_bytes;
}

// Transposes a block of 16 rows x (up to) 16 dims into kt columns.
template <DType T>
void KtBlock(const char* k, int64_t row_bytes, const int32_t* idx, int rows,
             int d0, int dn, float* kt) {
  const __mmask16 m = TailMask(dn);
  __m512 r[16];
  for (int j = 0; j < 16; ++j) {
    r[j] = j < rows ? Load16<T>(RowPtr(k, row_bytes, idx, j), d0, m)
                    : _mm512_setzero_ps();
  }
  Transpose16(r);
  for (int d = 0; d < dn; ++d) _mm512_storeu_ps(kt + (d0 + d) * kTileK, r[d]);
}

template <DType T>
void LoadKtT(const void* k, int64_t stride, const int32_t* idx, int n, int hd,
             float* kt) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(k);
  for (int j0 = 0; j0 < kTileK; j0 += 16) {
    const int rows = std::clamp(n - j0, 0, 16);
    for (int d0 = 0; d0 < hd; d0 += 16) {
      if (rows == 0) {
        for (int d = d0; d < std::min(hd, d0 + 16); ++d) {
          _mm512_storeu_ps(kt + d * kTileK + j0, _mm512_setzero_ps());
        }
        continue;
      }
      KtBlock<T>(idx ? base : base + j0 * row_bytes, row_bytes,
                 idx ? idx + j0 : nullptr, rows, d0, std::min(16, hd - d0),
                 kt + j0);
    }
  }
}

template <DType T>
void LoadVT(const void* v, int64_t stride, const int32_t* idx, int n, int hd,
            int ldv, float* vt) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(v);
  for (int j = 0; j < n; ++j) {
    const char* row = RowPtr(base, row_bytes, idx, j);
    for (int d = 0; d < ldv; d += 16) {
      const __mmask16 m = TailMask(hd - d);
      _mm512_storeu_ps(vt + j * ldv + d,
                       d < hd ? Load16<T>(row, d, m) : _mm512_setzero_ps());
    }
  }
}

template <int R>
void QkRows(const float* q, int ldq, const float* kt, int hd, float* s) {
  __m512 acc[R][4];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int d = 0; d < hd; ++d) {
    const float* kr = kt + d * kTileK;
    const __m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16);
    const __m512 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);
    for (int i = 0; i < R; ++i) {
      const __m512 b = _mm512_set1_ps(q[i * ldq + d]);
      acc[i][0] = _mm512_fmadd_ps(b, k0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, k1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(b, k2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(b, k3, acc[i][3]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < 4; ++v) {
      _mm512_storeu_ps(s + i * kTileK + 16 * v, acc[i][v]);
    }
  }
}

// Rows i < R, dims [d0, d0 + 16 * NV) of o.
template <int R, int NV>
void PvBlock(const float* p, const float* vt, int n, int ldv,
             const float* alpha, float* o) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int v = 0; v < NV; ++v) {
      acc[i][v] = _mm512_mul_ps(a, _mm512_loadu_ps(o + i * ldv + 16 * v));
    }
  }
  for (int j = 0; j < n; ++j) {
    __m512 vv[NV];
    for (int v = 0; v < NV; ++v) vv[v] = _mm512_loadu_ps(vt + j * ldv + 16 * v);
    for (int i = 0; i < R; ++i) {
      const __m512 b = _mm512_set1_ps(p[i * kTileK + j]);
      for (int v = 0; v < NV; ++v) {
        acc[i][v] = _mm512_fmadd_ps(b, vv[v], acc[i][v]);
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
void PvRows(const float* p, const float* vt, int n, int ldv, const float* alpha,
            float* o) {
  int d = 0;
  for (; d + 64 <= ldv; d += 64) PvBlock<R, 4>(p, vt + d, n, ldv, alpha, o + d);
  switch ((ldv - d) / 16) {
    case 3:
      PvBlock<R, 3>(p, vt + d, n, ldv, alpha, o + d);
      break;
    case 2:
      PvBlock<R, 2>(p, vt + d, n, ldv, alpha, o + d);
      break;
    case 1:
      PvBlock<R, 1>(p, vt + d, n, ldv, alpha, o + d);
      break;
    default:
      break;
  }
}

}  // namespace

void LoadKt(DType t, const void* k, int64_t stride, const int32_t* rows, int n,
            int hd, float* kt) {
  switch (t) {
    case DType::kF16:
      LoadKtT<DType::kF16>(k, stride, rows, n, hd, kt);
      return;
    case DType::kBF16:
      LoadKtT<DType::kBF16>(k, stride, rows, n, hd, kt);
      return;
    default:
      LoadKtT<DType::kF32>(k, stride, rows, n, hd, kt);
      return;
  }
}

void LoadV(DType t, const void* v, int64_t stride, const int32_t* rows, int n,
           int hd, int ldv, float* vt) {
  switch (t) {
    case DType::kF16:
      LoadVT<DType::kF16>(v, stride, rows, n, hd, ldv, vt);
      return;
    case DType::kBF16:
      LoadVT<DType::kBF16>(v, stride, rows, n, hd, ldv, vt);
      return;
    default:
      LoadVT<DType::kF32>(v, stride, rows, n, hd, ldv, vt);
      return;
  }
}

void Qk(const float* q, int ldq, int rows, const float* kt, int hd, float* s) {
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    QkRows<4>(q + i * ldq, ldq, kt, hd, s + i * kTileK);
  }
  const float* qi = q + i * ldq;
  float* si = s + i * kTileK;
  switch (rows - i) {
    case 3:
      QkRows<3>(qi, ldq, kt, hd, si);
      break;
    case 2:
      QkRows<2>(qi, ldq, kt, hd, si);
      break;
    case 1:
      QkRows<1>(qi, ldq, kt, hd, si);
      break;
    default:
      break;
  }
}

float SoftmaxRow(float* s, uint64_t valid, float* m, float* l) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  if (valid == 0) {
    for (int v = 0; v < 4; ++v)
      _mm512_storeu_ps(s + 16 * v, _mm512_setzero_ps());
    return 1.0f;
  }
  __mmask16 mk[4];
  __m512 sv[4];
  __m512 mx = ninf;
  for (int v = 0; v < 4; ++v) {
    mk[v] = static_cast<__mmask16>(valid >> (16 * v));
    sv[v] = _mm512_loadu_ps(s + 16 * v);
    mx = _mm512_mask_max_ps(mx, mk[v], mx, sv[v]);
  }
  const float m_new = std::max(*m, _mm512_reduce_max_ps(mx));
  const float alpha = std::exp(*m - m_new);
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int v = 0; v < 4; ++v) {
    const __m512 p = _mm512_maskz_mov_ps(mk[v], Exp(_mm512_sub_ps(sv[v], mv)));
    sum = _mm512_add_ps(sum, p);
    _mm512_storeu_ps(s + 16 * v, p);
  }
  *m = m_new;
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  return alpha;
}

void Pv(const float* p, int rows, const float* vt, int n, int ldv,
        const float* alpha, float* o) {
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    PvRows<4>(p + i * kTileK, vt, n, ldv, alpha + i, o + i * ldv);
  }
  const float* pi = p + i * kTileK;
  float* oi = o + i * ldv;
  switch (rows - i) {
    case 3:
      PvRows<3>(pi, vt, n, ldv, alpha + i, oi);
      break;
    case 2:
      PvRows<2>(pi, vt, n, ldv, alpha + i, oi);
      break;
    case 1:
      PvRows<1>(pi, vt, n, ldv, alpha + i, oi);
      break;
    default:
      break;
  }
}

}  // namespace ckv::kernels::cpu::avx512
