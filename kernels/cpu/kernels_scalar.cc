// Portable primitives (compiled without ISA flags): the fallback table and
// the baseline that the vectorised tables are tested against.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

namespace ckv::kernels::cpu {
namespace {

void ToF32(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(h[i]);
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(h[i]);
      return;
    }
    default:  // block types
      ref::DequantizeRow(t, src, n, dst);
      return;
  }
}

void Gemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
          int64_t n_in, const float* x, float* y) {
  std::vector<float> row(n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    ToF32(t, static_cast<const char*>(w) + r * row_bytes, n_in, row.data());
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += row[i + j] * x[i + j];
    }
    for (; i < n_in; ++i) acc[0] += row[i] * x[i];
    y[r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
           ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

void GemmTile(const float* const* a, const float* xt, int64_t k, float* y,
              int64_t ldy, int nr, int nc) {
  float c[kGemmRows][kGemmCols] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* xr = xt + kk * kGemmCols;
    for (int r = 0; r < kGemmRows; ++r) {
      const float av = a[r][kk];
      for (int j = 0; j < kGemmCols; ++j) c[r][j] += av * xr[j];
    }
  }
  for (int j = 0; j < nc; ++j) {
    for (int r = 0; r < nr; ++r) y[j * ldy + r] = c[r][j];
  }
}

const char* RowPtr(const void* base, int64_t row_bytes, const int32_t* rows,
                   int j) {
  return static_cast<const char*>(base) +
         (rows != nullptr ? int64_t{rows[j]} : int64_t{j}) * row_bytes;
}

void LoadKt(DType t, const void* k, int64_t stride, const int32_t* rows, int n,
            int hd, float* kt) {
  std::fill(kt, kt + int64_t{hd} * kTileK, 0.0f);
  std::vector<float> row(hd);
  const int64_t row_bytes = RowBytes(t, stride);
  for (int j = 0; j < n; ++j) {
    ToF32(t, RowPtr(k, row_bytes, rows, j), hd, row.data());
    for (int d = 0; d < hd; ++d) kt[d * kTileK + j] = row[d];
  }
}

void LoadV(DType t, const void* v, int64_t stride, const int32_t* rows, int n,
           int hd, int ldv, float* vt) {
  std::fill(vt, vt + int64_t{ldv} * kTileK, 0.0f);
  const int64_t row_bytes = RowBytes(t, stride);
  for (int j = 0; j < n; ++j) {
    ToF32(t, RowPtr(v, row_bytes, rows, j), hd, vt + j * ldv);
  }
}

void Qk(const float* q, int ldq, int rows, const float* kt, int hd, float* s) {
  for (int i = 0; i < rows; ++i) {
    float* si = s + i * kTileK;
    std::fill(si, si + kTileK, 0.0f);
    for (int d = 0; d < hd; ++d) {
      const float qd = q[i * ldq + d];
      const float* kr = kt + d * kTileK;
      for (int j = 0; j < kTileK; ++j) si[j] += qd * kr[j];
    }
  }
}

void QkRowMajor(const float* q, int ldq, int rows, const float* kr, int ldk,
                int n, float* s) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int d = 0; d < ldk; ++d) acc += q[i * ldq + d] * kr[j * ldk + d];
      s[i * kTileK + j] = acc;
    }
  }
}

void QkDirect(DType t, const void* k, int64_t stride, const int32_t* idx, int n,
              int hd, const float* q, int ldq, int rows, float* s) {
  std::vector<float> kt(int64_t{hd} * kTileK);
  LoadKt(t, k, stride, idx, n, hd, kt.data());
  Qk(q, ldq, rows, kt.data(), hd, s);
}

void PvDirect(DType t, const void* v, int64_t stride, const int32_t* idx, int n,
              int hd, const float* p, int rows, const float* alpha, float* o,
              int ldo) {
  std::vector<float> row(hd);
  const int64_t row_bytes = RowBytes(t, stride);
  for (int i = 0; i < rows; ++i) {
    for (int d = 0; d < hd; ++d) o[i * ldo + d] *= alpha[i];
  }
  for (int j = 0; j < n; ++j) {
    ToF32(t, RowPtr(v, row_bytes, idx, j), hd, row.data());
    for (int i = 0; i < rows; ++i) {
      const float pj = p[i * kTileK + j];
      for (int d = 0; d < hd; ++d) o[i * ldo + d] += pj * row[d];
    }
  }
}

float SoftmaxRow(float* s, uint64_t valid, float* m, float* l) {
  if (valid == 0) {
    std::fill(s, s + kTileK, 0.0f);
    return 1.0f;
  }
  float mx = -INFINITY;
  for (int j = 0; j < kTileK; ++j) {
    if ((valid >> j) & 1) mx = std::max(mx, s[j]);
  }
  const float m_new = std::max(*m, mx);
  const float alpha = std::exp(*m - m_new);  // exp(-inf) = 0 on first tile
  float sum = 0.0f;
  for (int j = 0; j < kTileK; ++j) {
    s[j] = ((valid >> j) & 1) ? std::exp(s[j] - m_new) : 0.0f;
    sum += s[j];
  }
  *m = m_new;
  *l = *l * alpha + sum;
  return alpha;
}

void Pv(const float* p, int rows, const float* vt, int n, int ldv,
        const float* alpha, float* o) {
  for (int i = 0; i < rows; ++i) {
    float* oi = o + i * ldv;
    for (int d = 0; d < ldv; ++d) oi[d] *= alpha[i];
    for (int j = 0; j < n; ++j) {
      const float pj = p[i * kTileK + j];
      if (pj == 0.0f) continue;
      const float* vr = vt + j * ldv;
      for (int d = 0; d < ldv; ++d) oi[d] += pj * vr[d];
    }
  }
}

void SwiGluImpl(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void ScoreBlock(const float* xt, const float* panels, int n_panels, int dim,
                float* s, int64_t lds) {
  for (int p = 0; p < n_panels; ++p) {
    const float* mp = panels + int64_t{p} * dim * kScoreCols;
    for (int r = 0; r < kScoreRows; ++r) {
      float acc[kScoreCols] = {};
      for (int d = 0; d < dim; ++d) {
        const float xv = xt[d * kScoreRows + r];
        for (int c = 0; c < kScoreCols; ++c) {
          acc[c] += xv * mp[d * kScoreCols + c];
        }
      }
      std::copy(acc, acc + kScoreCols, s + r * lds + p * kScoreCols);
    }
  }
}

void ScoreBlockNarrow(const float* xt, const float* panel, int dim, float* s,
                      int64_t lds) {
  for (int r = 0; r < kScoreRows; ++r) {
    float acc[kScoreColsNarrow] = {};
    for (int d = 0; d < dim; ++d) {
      const float xv = xt[d * kScoreRows + r];
      for (int c = 0; c < kScoreColsNarrow; ++c) {
        acc[c] += xv * panel[d * kScoreColsNarrow + c];
      }
    }
    std::copy(acc, acc + kScoreColsNarrow, s + r * lds);
  }
}

void Top2(const float* s, int n, float* best, int* best_idx, float* second) {
  float b = s[0], sec = -INFINITY;
  int bi = 0;
  for (int c = 1; c < n; ++c) {
    if (s[c] > b) {
      sec = b;
      b = s[c];
      bi = c;
    } else {
      sec = std::max(sec, s[c]);
    }
  }
  *best = b;
  *best_idx = bi;
  *second = sec;
}

void PageMinMax(DType t, const void* src, int64_t stride, int n, int dim,
                float* mn, float* mx) {
  std::vector<float> row(dim);
  const int64_t row_bytes = RowBytes(t, stride);
  ToF32(t, src, dim, mn);
  std::copy(mn, mn + dim, mx);
  for (int j = 1; j < n; ++j) {
    ToF32(t, static_cast<const char*>(src) + j * row_bytes, dim, row.data());
    for (int d = 0; d < dim; ++d) {
      mn[d] = std::min(mn[d], row[d]);
      mx[d] = std::max(mx[d], row[d]);
    }
  }
}

// The quest_scores order of kernel_set.h: 16 lanes, folded in halves.
void QuestScores(const float* q, const float* mn, const float* mx,
                 int64_t n_pages, int dim, float* scores) {
  constexpr int kLanes = 16;
  for (int64_t p = 0; p < n_pages; ++p) {
    float lane[kLanes] = {};
    for (int d = 0; d < dim; ++d) {
      const float hi = q[d] * mx[p * dim + d];
      const float lo = q[d] * mn[p * dim + d];
      lane[d % kLanes] += hi > lo ? hi : lo;
    }
    for (int half = kLanes / 2; half >= 1; half /= 2) {
      for (int l = 0; l < half; ++l) lane[l] += lane[l + half];
    }
    scores[p] = lane[0];
  }
}

void CentroidScores(const float* qs, int n_q, const uint16_t* panels, int64_t n,
                    int dim, float* s, int64_t lds) {
  for (int64_t c = 0; c < n; ++c) {
    const uint16_t* col = panels + (c / kCentroidPanel) * dim * kCentroidPanel +
                          c % kCentroidPanel;
    for (int j = 0; j < n_q; ++j) {
      float acc = 0.0f;
      for (int d = 0; d < dim; ++d) {
        acc = std::fma(qs[j * dim + d], F16ToF32(col[d * kCentroidPanel]), acc);
      }
      s[j * lds + c] = acc;
    }
  }
}

}  // namespace

const KernelSet& ScalarKernels() {
  static const KernelSet ks = {
      .name = "scalar",
      .to_f32 = ToF32,
      .gemv = Gemv,
      .gemm_tile = GemmTile,
      .pack_bf16_rows = nullptr,
      .pack_bf16_cols = nullptr,
      .gemm_bf16_tile = nullptr,
      .to_pairs_bf16 = nullptr,
      .pair_rows_bf16 = nullptr,
      .qk_bf16 = nullptr,
      .pv_bf16 = nullptr,
      .load_kt = LoadKt,
      .load_v = LoadV,
      .qk = Qk,
      .softmax_row = SoftmaxRow,
      .pv = Pv,
      .swiglu = SwiGluImpl,
      .score_block = ScoreBlock,
      .score_block_narrow = ScoreBlockNarrow,
      .top2 = Top2,
      .page_minmax = PageMinMax,
      .quest_scores = QuestScores,
      .centroid_scores = CentroidScores,
      .quant_gemv = nullptr,
      .quantize_acts = nullptr,
      .quant_gemv_batches = nullptr,
      .qk_rowmajor = QkRowMajor,
      .qk_direct = QkDirect,
      .pv_direct = PvDirect,
  };
  return ks;
}

}  // namespace ckv::kernels::cpu
