// AVX2/FMA/F16C primitives for CPUs without AVX-512 (built with
// -mavx2 -mfma -mf16c; used only when GetCpuFeatures() reports them).
// MatMul, the k-means score block and Quest page bounds are vectorised here,
// attention and SwiGLU in kernels_avx2_attn.cc; top2 reuses the portable
// version.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/count_dispatch.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/kernels_avx2_attn.h"
#include "kernels/cpu/quant_kernels.h"

namespace ckv::kernels::cpu {
namespace avx2 {
namespace {

using avx2util::Element;
using avx2util::Load8;
using avx2util::Sum8;

template <DType T>
float DotRow(const void* row, int64_t n, const float* x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(Load8<T>(row, i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(Load8<T>(row, i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float s = Sum8(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += Element<T>(row, i) * x[i];
  return s;
}

float DotQ8(const void* row, int64_t n, const float* x) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t k = 0; k < n / kQ8_0BlockSize; ++k) {
    __m256 s = _mm256_setzero_ps();
    for (int j = 0; j < kQ8_0BlockSize; j += 8) {
      const __m128i q =
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[k].qs + j));
      s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                          _mm256_loadu_ps(x + 32 * k + j), s);
    }
    acc = _mm256_fmadd_ps(s, _mm256_set1_ps(_cvtsh_ss(b[k].d)), acc);
  }
  return Sum8(acc);
}

// R = 4 rows at once, two accumulators per row (the chains of four rows
// overlap, which one row's FMA latency would not), x shared by the rows;
// y[r] = the dot of row r with x. Tail elements (n % 16) are added last.
template <DType T>
void DotRows4(const char* w, int64_t row_bytes, int64_t n, const float* x,
              float* y) {
  __m256 acc[4][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  int64_t i = 0;
  constexpr int64_t kElemBytes = T == DType::kF32 ? 4 : 2;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    const __m256 x1 = _mm256_loadu_ps(x + i + 8);
    for (int r = 0; r < 4; ++r) {
      const char* row = w + r * row_bytes;
      // The same part of the next 4 rows (a decode GEMV streams the
      // matrix once): its memory latency overlaps this group's work.
      _mm_prefetch(row + 4 * row_bytes + i * kElemBytes, _MM_HINT_T0);
      acc[r][0] = _mm256_fmadd_ps(Load8<T>(row, i), x0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(Load8<T>(row, i + 8), x1, acc[r][1]);
    }
  }
  // Lane sums of the four rows in one vector: hadd pairs rows, then the
  // 128-bit halves are added.
  const __m256 h01 = _mm256_hadd_ps(_mm256_add_ps(acc[0][0], acc[0][1]),
                                    _mm256_add_ps(acc[1][0], acc[1][1]));
  const __m256 h23 = _mm256_hadd_ps(_mm256_add_ps(acc[2][0], acc[2][1]),
                                    _mm256_add_ps(acc[3][0], acc[3][1]));
  const __m256 h = _mm256_hadd_ps(h01, h23);
  __m128 sums =
      _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  if (i < n) {
    alignas(16) float tail[4] = {0, 0, 0, 0};
    for (int r = 0; r < 4; ++r) {
      for (int64_t j = i; j < n; ++j) {
        tail[r] += Element<T>(w + r * row_bytes, j) * x[j];
      }
    }
    sums = _mm_add_ps(sums, _mm_load_ps(tail));
  }
  _mm_storeu_ps(y, sums);
}

float DotOne(DType t, const void* row, int64_t row_bytes, int64_t n_in,
             const float* x) {
  switch (t) {
    case DType::kF32:
      return DotRow<DType::kF32>(row, n_in, x);
    case DType::kF16:
      return DotRow<DType::kF16>(row, n_in, x);
    case DType::kBF16:
      return DotRow<DType::kBF16>(row, n_in, x);
    case DType::kQ8_0:
      return DotQ8(row, n_in, x);
    default: {  // other block types: the portable path
      float y = 0;
      ScalarKernels().gemv(t, row, row_bytes, 1, n_in, x, &y);
      return y;
    }
  }
}

// Rows in groups of 4 (DotRows4); returns the first row left undone.
template <DType T>
int64_t GemvRows4(const char* w, int64_t row_bytes, int64_t n_rows,
                  int64_t n_in, const float* x, float* y) {
  int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    DotRows4<T>(w + r * row_bytes, row_bytes, n_in, x, y + r);
  }
  return r;
}

void Gemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
          int64_t n_in, const float* x, float* y) {
  const char* base = static_cast<const char*>(w);
  int64_t r = 0;  // block types: every row one by one
  switch (t) {
    case DType::kF32:
      r = GemvRows4<DType::kF32>(base, row_bytes, n_rows, n_in, x, y);
      break;
    case DType::kF16:
      r = GemvRows4<DType::kF16>(base, row_bytes, n_rows, n_in, x, y);
      break;
    case DType::kBF16:
      r = GemvRows4<DType::kBF16>(base, row_bytes, n_rows, n_in, x, y);
      break;
    default:
      break;
  }
  for (; r < n_rows; ++r) {
    y[r] = DotOne(t, base + r * row_bytes, row_bytes, n_in, x);
  }
}

template <DType T>
void ToF32T(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8<T>(src, i));
  for (; i < n; ++i) dst[i] = Element<T>(src, i);
}

void ToF32(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      ToF32T<DType::kF16>(src, n, dst);
      return;
    case DType::kBF16:
      ToF32T<DType::kBF16>(src, n, dst);
      return;
    default:  // block types
      avx2q::QuantToF32(t, src, n, dst);
      return;
  }
}

// Rows [r0, r0+4) x columns [c0, c0+16) of the register tile.
void GemmQuarter(const float* const* a, const float* xt, int64_t k, int r0,
                 int c0, float (*tmp)[kGemmCols]) {
  __m256 c[4][2];
  for (auto& row : c) row[0] = row[1] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m256 x0 = _mm256_loadu_ps(xt + kk * kGemmCols + c0);
    const __m256 x1 = _mm256_loadu_ps(xt + kk * kGemmCols + c0 + 8);
    for (int r = 0; r < 4; ++r) {
      const __m256 b = _mm256_broadcast_ss(a[r0 + r] + kk);
      c[r][0] = _mm256_fmadd_ps(b, x0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(b, x1, c[r][1]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    _mm256_storeu_ps(tmp[r0 + r] + c0, c[r][0]);
    _mm256_storeu_ps(tmp[r0 + r] + c0 + 8, c[r][1]);
  }
}

void GemmTile(const float* const* a, const float* xt, int64_t k, float* y,
              int64_t ldy, int nr, int nc) {
  static_assert(kGemmRows == 8 && kGemmCols == 32);
  float tmp[kGemmRows][kGemmCols];
  for (int r0 = 0; r0 < 8; r0 += 4) {
    for (int c0 = 0; c0 < 32; c0 += 16) GemmQuarter(a, xt, k, r0, c0, tmp);
  }
  for (int j = 0; j < nc; ++j) {
    for (int r = 0; r < nr; ++r) y[j * ldy + r] = tmp[r][j];
  }
}

// Keys [r0, r0 + 6) x columns [c0, c0 + 16) of one panel.
void ScoreSixth(const float* xt, const float* mp, int dim, int r0, int c0,
                float* s, int64_t lds) {
  __m256 acc[6][2];
  for (auto& row : acc) row[0] = row[1] = _mm256_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    const __m256 m0 = _mm256_loadu_ps(mp + d * kScoreCols + c0);
    const __m256 m1 = _mm256_loadu_ps(mp + d * kScoreCols + c0 + 8);
    const float* xr = xt + d * kScoreRows + r0;
    for (int r = 0; r < 6; ++r) {
      const __m256 b = _mm256_broadcast_ss(xr + r);
      acc[r][0] = _mm256_fmadd_ps(b, m0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(b, m1, acc[r][1]);
    }
  }
  for (int r = 0; r < 6; ++r) {
    _mm256_storeu_ps(s + (r0 + r) * lds + c0, acc[r][0]);
    _mm256_storeu_ps(s + (r0 + r) * lds + c0 + 8, acc[r][1]);
  }
}

void ScoreBlock(const float* xt, const float* panels, int n_panels, int dim,
                float* s, int64_t lds) {
  static_assert(kScoreRows == 12 && kScoreCols == 32);
  for (int p = 0; p < n_panels; ++p) {
    const float* mp = panels + int64_t{p} * dim * kScoreCols;
    for (int r0 = 0; r0 < kScoreRows; r0 += 6) {
      for (int c0 = 0; c0 < kScoreCols; c0 += 16) {
        ScoreSixth(xt, mp, dim, r0, c0, s + p * kScoreCols, lds);
      }
    }
  }
}

void ScoreBlockNarrow(const float* xt, const float* panel, int dim, float* s,
                      int64_t lds) {
  static_assert(kScoreRows == 12 && kScoreColsNarrow == 8);
  __m256 acc[kScoreRows];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    const __m256 c = _mm256_loadu_ps(panel + d * kScoreColsNarrow);
    const float* xr = xt + d * kScoreRows;
    for (int r = 0; r < kScoreRows; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(xr + r), c, acc[r]);
    }
  }
  for (int r = 0; r < kScoreRows; ++r) _mm256_storeu_ps(s + r * lds, acc[r]);
}

template <DType T>
void PageMinMaxT(const void* src, int64_t stride, int n, int dim, float* mn,
                 float* mx) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(src);
  int d = 0;
  for (; d + 8 <= dim; d += 8) {
    __m256 lo = Load8<T>(base, d), hi = lo;
    for (int j = 1; j < n; ++j) {
      const __m256 v = Load8<T>(base + j * row_bytes, d);
      lo = _mm256_min_ps(lo, v);
      hi = _mm256_max_ps(hi, v);
    }
    _mm256_storeu_ps(mn + d, lo);
    _mm256_storeu_ps(mx + d, hi);
  }
  for (; d < dim; ++d) {
    float lo = Element<T>(base, d), hi = lo;
    for (int j = 1; j < n; ++j) {
      const float v = Element<T>(base + j * row_bytes, d);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    mn[d] = lo;
    mx[d] = hi;
  }
}

void PageMinMax(DType t, const void* src, int64_t stride, int n, int dim,
                float* mn, float* mx) {
  switch (t) {
    case DType::kF16:
      PageMinMaxT<DType::kF16>(src, stride, n, dim, mn, mx);
      return;
    case DType::kBF16:
      PageMinMaxT<DType::kBF16>(src, stride, n, dim, mn, mx);
      return;
    default:
      PageMinMaxT<DType::kF32>(src, stride, n, dim, mn, mx);
      return;
  }
}

// max(q * hi, q * lo) of 8 elements from d, the first `n` of them loaded
// (the rest +0: they leave a lane's sum unchanged).
inline __m256 QuestTerms(const float* q, const float* lo, const float* hi,
                         int d, int n) {
  if (n >= 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    return _mm256_max_ps(_mm256_mul_ps(qv, _mm256_loadu_ps(hi + d)),
                         _mm256_mul_ps(qv, _mm256_loadu_ps(lo + d)));
  }
  if (n <= 0) return _mm256_setzero_ps();
  alignas(32) float qs[8] = {}, los[8] = {}, his[8] = {};
  std::memcpy(qs, q + d, sizeof(float) * n);
  std::memcpy(los, lo + d, sizeof(float) * n);
  std::memcpy(his, hi + d, sizeof(float) * n);
  const __m256 qv = _mm256_load_ps(qs);
  return _mm256_max_ps(_mm256_mul_ps(qv, _mm256_load_ps(his)),
                       _mm256_mul_ps(qv, _mm256_load_ps(los)));
}

// The quest_scores order of kernel_set.h: lanes 0-7 in a, 8-15 in b; the
// fold b + a, then Sum8's halves.
void QuestScores(const float* q, const float* mn, const float* mx,
                 int64_t n_pages, int dim, float* scores) {
  for (int64_t p = 0; p < n_pages; ++p) {
    const float* lo = mn + p * dim;
    const float* hi = mx + p * dim;
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int d = 0; d < dim; d += 16) {
      a = _mm256_add_ps(a, QuestTerms(q, lo, hi, d, dim - d));
      b = _mm256_add_ps(b, QuestTerms(q, lo, hi, d + 8, dim - d - 8));
    }
    scores[p] = Sum8(_mm256_add_ps(b, a));
  }
}

// One panel of 16 centroids (two vectors of 8 lanes) for NQ queries, in d
// order; the first `cols` scores are stored.
template <int NQ>
void CentroidPanel(const float* qs, const uint16_t* panel, int dim, int cols,
                   float* s, int64_t lds) {
  __m256 acc[NQ][2];
  for (auto& a : acc) a[0] = a[1] = _mm256_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    const uint16_t* row = panel + d * kCentroidPanel;
    const __m256 c0 =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
    const __m256 c1 = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 8)));
    for (int j = 0; j < NQ; ++j) {
      const __m256 q = _mm256_broadcast_ss(qs + j * dim + d);
      acc[j][0] = _mm256_fmadd_ps(q, c0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(q, c1, acc[j][1]);
    }
  }
  for (int j = 0; j < NQ; ++j) {
    alignas(32) float out[kCentroidPanel];
    _mm256_store_ps(out, acc[j][0]);
    _mm256_store_ps(out + 8, acc[j][1]);
    std::memcpy(s + j * lds, out, sizeof(float) * cols);
  }
}

template <int NQ>
void CentroidScoresT(const float* qs, const uint16_t* panels, int64_t n,
                     int dim, float* s, int64_t lds) {
  static_assert(kCentroidPanel == 16);
  for (int64_t c = 0; c < n; c += kCentroidPanel) {
    const int cols = static_cast<int>(std::min<int64_t>(kCentroidPanel, n - c));
    CentroidPanel<NQ>(qs, panels + c * dim, dim, cols, s + c, lds);
  }
}

void CentroidScores(const float* qs, int n_q, const uint16_t* panels, int64_t n,
                    int dim, float* s, int64_t lds) {
  WithCount<kCentroidQueries>(n_q, [&](auto nq) {
    CentroidScoresT<decltype(nq)::value>(qs, panels, n, dim, s, lds);
  });
}

}  // namespace
}  // namespace avx2

const KernelSet* Avx2Kernels() {
  const KernelSet& s = ScalarKernels();
  static const KernelSet ks = {
      .name = "avx2",
      .to_f32 = avx2::ToF32,
      .gemv = avx2::Gemv,
      .gemm_tile = avx2::GemmTile,
      .pack_bf16_rows = nullptr,
      .pack_bf16_cols = nullptr,
      .gemm_bf16_tile = nullptr,
      .to_pairs_bf16 = nullptr,
      .pair_rows_bf16 = nullptr,
      .qk_bf16 = nullptr,
      .pv_bf16 = nullptr,
      .load_kt = avx2::LoadKt,
      .load_v = avx2::LoadV,
      .qk = avx2::Qk,
      .softmax_row = avx2::SoftmaxRow,
      .pv = avx2::Pv,
      .swiglu = avx2::SwiGlu,
      .score_block = avx2::ScoreBlock,
      .score_block_narrow = avx2::ScoreBlockNarrow,
      .top2 = s.top2,
      .page_minmax = avx2::PageMinMax,
      .quest_scores = avx2::QuestScores,
      .centroid_scores = avx2::CentroidScores,
      .quant_gemv = avx2q::FusedGemv,
      .quantize_acts = avx2q::QuantizeActs,
      .quant_gemv_batches = nullptr,
      .qk_rowmajor = avx2::QkRowMajor,
      .qk_direct = avx2::QkDirect,
      .pv_direct = avx2::PvDirect,
  };
  return &ks;
}

}  // namespace ckv::kernels::cpu
