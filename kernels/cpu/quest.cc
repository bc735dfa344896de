// Fast centroid scores and Quest page bounds/scores (contracts in
// cluster_ops.h): thin drivers over the active KernelSet's primitives.
#include <algorithm>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/kernel_set.h"

namespace ckv::kernels::cpu {

void CentroidScores(const float* q, const float* centroids, int64_t n, int dim,
                    float* scores) {
  if (n <= 0) return;
  ActiveKernels().gemv(DType::kF32, centroids, int64_t{dim} * 4, n, dim, q,
                       scores);
}

// Blocks of centroids that stay in L2 while every query scores them. Blocks
// start at multiples of 4 rows, so each row gets exactly the arithmetic of
// CentroidScores (the gemv kernels group rows by 4 from their first).
void CentroidScoresMulti(const float* qs, int n_q, const float* centroids,
                         int64_t n, int dim, float* scores, int64_t ld) {
  if (n <= 0 || dim <= 0) return;
  constexpr int64_t kBlockBytes = 64 * 1024;
  const int64_t row_bytes = int64_t{dim} * 4;
  const int64_t block = std::max<int64_t>(4, kBlockBytes / row_bytes / 4 * 4);
  const KernelSet& ks = ActiveKernels();
  for (int64_t b = 0; b < n; b += block) {
    const int64_t nb = std::min(block, n - b);
    for (int j = 0; j < n_q; ++j) {
      ks.gemv(DType::kF32, centroids + b * dim, row_bytes, nb, dim,
              qs + int64_t{j} * dim, scores + j * ld + b);
    }
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

}  // namespace ckv::kernels::cpu
