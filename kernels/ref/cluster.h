// The reference clustered-KV ops: k-means (the exact contract is in
// kernels/cluster_types.h), centroid scores over F32 centroids, Quest page
// bounds and scores; double accumulation. The oracle of the CPU's fast
// forms (kernels/cpu/cluster_ops.h) and of device kernels.
#pragma once

#include <cstdint>

#include "kernels/cluster_types.h"
#include "kernels/dtype.h"

namespace ckv::kernels::ref {

void KMeans(const KMeansProblem& p, KMeansResult* out);
void CentroidScores(const float* q, const float* centroids, int64_t n, int dim,
                    float* scores);
void CentroidScoresMulti(const float* qs, int n_q, const float* centroids,
                         int64_t n, int dim, float* scores, int64_t ld);
// Pages of `page_size` rows cut from rows [0, n) (the last may be shorter);
// page_min/page_max: [ceil(n/page_size)][dim].
void QuestPageBounds(const void* keys, DType dtype, int64_t stride, int64_t n,
                     int dim, int page_size, float* page_min, float* page_max);
void QuestScores(const float* q, const float* page_min, const float* page_max,
                 int64_t n_pages, int dim, float* scores);
// Exact key scores of n_q queries (qs: [n_q][dim]) against n key rows:
// scores[j * ld + i] = sum_d qs[j][d] * K_i[d] (ld >= n), K_i the row at
// keys + r * stride elements of type dtype (F32, F16 or BF16), r = rows[i]
// when rows is set (a gather), else r = i.
void KeyScores(const float* qs, int n_q, const void* keys, DType dtype,
               int64_t stride, const int32_t* rows, int64_t n, int dim,
               float* scores, int64_t ld);

}  // namespace ckv::kernels::ref
