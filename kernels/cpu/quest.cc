// Fast centroid scores and Quest page bounds/scores (contracts in
// cluster_ops.h): thin drivers over the active KernelSet's primitives.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu {

void PackCentroidPanels(const float* centroids, int64_t n, int dim,
                        std::vector<uint16_t>* panels) {
  constexpr float kF16Max = 65504.0f;
  const int64_t n_panels = (n + kCentroidPanel - 1) / kCentroidPanel;
  panels->assign(n_panels * kCentroidPanel * dim, 0);
  for (int64_t c = 0; c < n; ++c) {
    uint16_t* col = panels->data() +
                    (c / kCentroidPanel) * dim * kCentroidPanel +
                    c % kCentroidPanel;
    for (int d = 0; d < dim; ++d) {
      const float x = centroids[c * dim + d];
      col[d * kCentroidPanel] =
          F32ToF16(x != x ? x : std::clamp(x, -kF16Max, kF16Max));
    }
  }
}

void CentroidScores(const float* q, const uint16_t* panels, int64_t n, int dim,
                    float* scores) {
  CentroidScoresMulti(q, 1, panels, n, dim, scores, n);
}

// Every query reads a panel while it is in L1; the centroids stream from
// memory once per kCentroidQueries queries.
void CentroidScoresMulti(const float* qs, int n_q, const uint16_t* panels,
                         int64_t n, int dim, float* scores, int64_t ld) {
  if (n <= 0 || dim <= 0) return;
  const KernelSet& ks = ActiveKernels();
  for (int j = 0; j < n_q; j += kCentroidQueries) {
    ks.centroid_scores(qs + int64_t{j} * dim,
                       std::min(kCentroidQueries, n_q - j), panels, n, dim,
                       scores + j * ld, ld);
  }
}

void QuestPageBounds(const void* keys, DType dtype, int64_t stride, int64_t n,
                     int dim, int page_size, float* page_min, float* page_max) {
  const KernelSet& ks = ActiveKernels();
  const int64_t row_bytes = RowBytes(dtype, stride);
  for (int64_t p = 0; p * page_size < n; ++p) {
    const int64_t begin = p * page_size;
    const int rows = static_cast<int>(std::min<int64_t>(page_size, n - begin));
    ks.page_minmax(dtype, static_cast<const char*>(keys) + begin * row_bytes,
                   stride, rows, dim, page_min + p * dim, page_max + p * dim);
  }
}

void QuestScores(const float* q, const float* page_min, const float* page_max,
                 int64_t n_pages, int dim, float* scores) {
  ActiveKernels().quest_scores(q, page_min, page_max, n_pages, dim, scores);
}

// Tiles of kTileK keys: read in place by qk_direct where the table has it
// (no F32 copy), else transposed once (load_kt) and scored against every
// query.
void KeyScores(const float* qs, int n_q, const void* keys, DType dtype,
               int64_t stride, const int32_t* rows, int64_t n, int dim,
               float* scores, int64_t ld) {
  if (n <= 0 || n_q <= 0 || dim <= 0) return;
  const KernelSet& ks = ActiveKernels();
  const bool direct = ks.qk_direct != nullptr && dim % 8 == 0;
  thread_local std::vector<float> kt, s;
  if (!direct) kt.resize(static_cast<size_t>(dim) * kTileK);
  s.resize(static_cast<size_t>(n_q) * kTileK);
  const int64_t row_bytes = RowBytes(dtype, stride);
  for (int64_t i0 = 0; i0 < n; i0 += kTileK) {
    const int tile = static_cast<int>(std::min<int64_t>(kTileK, n - i0));
    const void* base = rows != nullptr
                           ? keys
                           : static_cast<const char*>(keys) + i0 * row_bytes;
    const int32_t* idx = rows != nullptr ? rows + i0 : nullptr;
    if (direct) {
      ks.qk_direct(dtype, base, stride, idx, tile, dim, qs, dim, n_q, s.data());
    } else {
      ks.load_kt(dtype, base, stride, idx, tile, dim, kt.data());
      ks.qk(qs, dim, n_q, kt.data(), dim, s.data());
    }
    for (int j = 0; j < n_q; ++j) {
      std::copy_n(s.data() + static_cast<size_t>(j) * kTileK, tile,
                  scores + j * ld + i0);
    }
  }
}

}  // namespace ckv::kernels::cpu
