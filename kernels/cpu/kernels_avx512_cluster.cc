// AVX-512 primitives of the clustered KV store (kmeans.cc, quest.cc): the
// k-means score block, top-2 of a score row, Quest page bounds and scores.
// Same contracts as KernelSet (kernel_set.h).
#include <cmath>

#include "kernels/cpu/avx512_util.h"
#include "kernels/cpu/count_dispatch.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu::avx512 {
namespace {

static_assert(kScoreRows == 12 && kScoreCols == 32);

// One panel: 12 keys x 32 centroids in 24 accumulators; per element d two
// centroid vectors are loaded and the 12 key elements broadcast.
void ScorePanel(const float* xt, const float* mp, int dim, float* s,
                int64_t lds) {
  __m512 acc[kScoreRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  for (int d = 0; d < dim; ++d) {
    const __m512 m0 = _mm512_loadu_ps(mp + d * kScoreCols);
    const __m512 m1 = _mm512_loadu_ps(mp + d * kScoreCols + 16);
    const float* xr = xt + d * kScoreRows;
#pragma GCC unroll 12
    for (int r = 0; r < kScoreRows; ++r) {
      const __m512 b = _mm512_set1_ps(xr[r]);
      acc[r][0] = _mm512_fmadd_ps(b, m0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(b, m1, acc[r][1]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kScoreRows; ++r) {
    _mm512_storeu_ps(s + r * lds, acc[r][0]);
    _mm512_storeu_ps(s + r * lds + 16, acc[r][1]);
  }
}

template <DType T>
void PageMinMaxT(const void* src, int64_t stride, int n, int dim, float* mn,
                 float* mx) {
  const int64_t row_bytes = RowBytes(T, stride);
  const char* base = static_cast<const char*>(src);
  for (int d = 0; d < dim; d += 16) {
    const __mmask16 m = TailMask(dim - d);
    __m512 lo = Load16<T>(base, d, m), hi = lo;
    for (int j = 1; j < n; ++j) {
      const __m512 v = Load16<T>(base + j * row_bytes, d, m);
      lo = _mm512_min_ps(lo, v);
      hi = _mm512_max_ps(hi, v);
    }
    _mm512_mask_storeu_ps(mn + d, m, lo);
    _mm512_mask_storeu_ps(mx + d, m, hi);
  }
}

// The 16 lanes folded in halves (kernel_set.h quest_scores' order; not
// _mm512_reduce_add_ps, whose order is the compiler's).
inline float FoldLanes(__m512 v) {
  const __m256 h8 = _mm256_add_ps(
      _mm512_castps512_ps256(v),
      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 h4 =
      _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

// P pages at once (independent accumulators hide the add latency).
template <int P>
void QuestPages(const float* q, const float* mn, const float* mx, int dim,
                float* scores) {
  __m512 acc[P];
  for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
  for (int d = 0; d < dim; d += 16) {
    const __mmask16 m = TailMask(dim - d);
    const __m512 qv = _mm512_maskz_loadu_ps(m, q + d);
    for (int p = 0; p < P; ++p) {
      const __m512 hi = _mm512_maskz_loadu_ps(m, mx + p * dim + d);
      const __m512 lo = _mm512_maskz_loadu_ps(m, mn + p * dim + d);
      acc[p] = _mm512_add_ps(
          acc[p], _mm512_max_ps(_mm512_mul_ps(qv, hi), _mm512_mul_ps(qv, lo)));
    }
  }
  for (int p = 0; p < P; ++p) scores[p] = FoldLanes(acc[p]);
}

}  // namespace

void ScoreBlock(const float* xt, const float* panels, int n_panels, int dim,
                float* s, int64_t lds) {
  for (int p = 0; p < n_panels; ++p) {
    ScorePanel(xt, panels + int64_t{p} * dim * kScoreCols, dim,
               s + p * kScoreCols, lds);
  }
}

void Top2(const float* s, int n, float* best, int* best_idx, float* second) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m1 = ninf, m2 = ninf;  // per lane: largest and second largest
  for (int i = 0; i < n; i += 16) {
    const __m512 v = _mm512_mask_loadu_ps(ninf, TailMask(n - i), s + i);
    m2 = _mm512_max_ps(m2, _mm512_min_ps(m1, v));
    m1 = _mm512_max_ps(m1, v);
  }
  const float b = _mm512_reduce_max_ps(m1);
  const __m512 bv = _mm512_set1_ps(b);
  int idx = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __mmask16 eq = _mm512_mask_cmp_ps_mask(
        m, _mm512_maskz_loadu_ps(m, s + i), bv, _CMP_EQ_OQ);
    if (eq != 0) {
      idx = i + __builtin_ctz(eq);
      break;
    }
  }
  // Remove one lane holding the maximum; the rest and m2 hold the runner-up.
  const __mmask16 lane = _mm512_cmp_ps_mask(m1, bv, _CMP_EQ_OQ);
  const __mmask16 one = lane & static_cast<__mmask16>(-lane);
  m1 = _mm512_mask_mov_ps(m1, one, ninf);
  *best = b;
  *best_idx = idx;
  *second = std::fmax(_mm512_reduce_max_ps(m1), _mm512_reduce_max_ps(m2));
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

void QuestScores(const float* q, const float* mn, const float* mx,
                 int64_t n_pages, int dim, float* scores) {
  int64_t p = 0;
  for (; p + 4 <= n_pages; p += 4) {
    QuestPages<4>(q, mn + p * dim, mx + p * dim, dim, scores + p);
  }
  for (; p < n_pages; ++p) {
    QuestPages<1>(q, mn + p * dim, mx + p * dim, dim, scores + p);
  }
}

// NP panels of 16 centroids (one per lane) for NQ queries: per element d
// one vector per panel times each query's element d, in d order (NP > 1
// gives few queries independent FMA chains). Panel i stores the lanes of
// masks[i].
template <int NQ, int NP>
void CentroidPanels(const float* qs, const uint16_t* panels, int dim,
                    const __mmask16* masks, float* s, int64_t lds) {
  __m512 acc[NP][NQ];
  for (auto& per_panel : acc) {
    for (auto& a : per_panel) a = _mm512_setzero_ps();
  }
  for (int d = 0; d < dim; ++d) {
    for (int i = 0; i < NP; ++i) {
      const __m512 c =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              panels + (i * dim + d) * kCentroidPanel)));
      for (int j = 0; j < NQ; ++j) {
        acc[i][j] =
            _mm512_fmadd_ps(_mm512_set1_ps(qs[j * dim + d]), c, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < NP; ++i) {
    for (int j = 0; j < NQ; ++j) {
      _mm512_mask_storeu_ps(s + j * lds + i * kCentroidPanel, masks[i],
                            acc[i][j]);
    }
  }
}

template <int NQ>
void CentroidScoresT(const float* qs, const uint16_t* panels, int64_t n,
                     int dim, float* s, int64_t lds) {
  static_assert(kCentroidPanel == 16);
  constexpr int kPanels = NQ <= 2 ? 4 / NQ : 1;
  int64_t c = 0;
  for (; c + kPanels * kCentroidPanel <= n; c += kPanels * kCentroidPanel) {
    __mmask16 all[kPanels];
    for (auto& m : all) m = 0xFFFF;
    CentroidPanels<NQ, kPanels>(qs, panels + c * dim, dim, all, s + c, lds);
  }
  for (; c < n; c += kCentroidPanel) {
    const __mmask16 m = TailMask(n - c);
    CentroidPanels<NQ, 1>(qs, panels + c * dim, dim, &m, s + c, lds);
  }
}

void CentroidScores(const float* qs, int n_q, const uint16_t* panels, int64_t n,
                    int dim, float* s, int64_t lds) {
  WithCount<kCentroidQueries>(n_q, [&](auto nq) {
    CentroidScoresT<decltype(nq)::value>(qs, panels, n, dim, s, lds);
  });
}

}  // namespace ckv::kernels::cpu::avx512
