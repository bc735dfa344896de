// Compute ops of the clustered KV store: k-means over keys, centroid scores
// and Quest page bounds/scores. Same rules as ops.h: the scalar reference in
// kernels/ref/cluster.h is the oracle; these are vectorised and parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cluster_types.h"
#include "kernels/dtype.h"
#include "kernels/ref/cluster.h"

namespace ckv::kernels::cpu {

class ThreadPool;

// The types live in kernels/cluster_types.h, the references in
// kernels/ref/cluster.h.
using kernels::ClusterMetric;
using kernels::KMeansProblem;
using kernels::KMeansResult;

// scores[c] = sum_d q[d] * centroids[c*dim + d] for c < n.
// CentroidScoresMulti: the same for n_q queries (qs: [n_q][dim]) into
// scores[j * ld + c] (ld >= n). The fast forms read the centroids packed
// by PackCentroidPanels (panels of kCentroidPanel centroids, element-major,
// zero-padded: kernel_set.h) and compute every score as the FMA chain over
// d of KernelSet::centroid_scores -- the same bits for one query or many,
// on every kernel table (the query heads of a GQA group share their KV
// head's centroids and are scored in one pass).
// Quest page bounds over rows [begin, end) of one page: per channel min/max.
// Quest score of a page: sum_d max(q[d]*max[d], q[d]*min[d]).

// Solves all problems, in parallel across problems (and within large ones).
void KMeansBatch(ThreadPool* pool, const KMeansProblem* problems, int count,
                 KMeansResult* results);
// Centroids [n][dim] as F16 panels (KernelSet::centroid_scores): each
// element rounded to nearest, saturating at +-65504 (finite centroids stay
// finite). Half the bytes of F32: scoring streams them from memory.
void PackCentroidPanels(const float* centroids, int64_t n, int dim,
                        std::vector<uint16_t>* panels);
void CentroidScores(const float* q, const uint16_t* panels, int64_t n, int dim,
                    float* scores);
void CentroidScoresMulti(const float* qs, int n_q, const uint16_t* panels,
                         int64_t n, int dim, float* scores, int64_t ld);
void QuestPageBounds(const void* keys, DType dtype, int64_t stride, int64_t n,
                     int dim, int page_size, float* page_min, float* page_max);
void QuestScores(const float* q, const float* page_min, const float* page_max,
                 int64_t n_pages, int dim, float* scores);
// Exact key scores (ref::KeyScores's contract): scores[j * ld + i] =
// q_j . K_i for j < n_q, i < n, the rows gathered through `rows` when set.
// F32 sums in the attention's decode order (KernelSet::qk_direct when the
// table has it and dim % 8 == 0, else load_kt + qk), so within ~1e-6 *
// dim * |q||K| of the reference, not bit-equal to it.
void KeyScores(const float* qs, int n_q, const void* keys, DType dtype,
               int64_t stride, const int32_t* rows, int64_t n, int dim,
               float* scores, int64_t ld);

}  // namespace ckv::kernels::cpu
