// Compute ops of the clustered KV store: k-means over keys, centroid scores
// and Quest page bounds/scores. Same rules as ops.h: a scalar reference in
// ref:: is the oracle; the fast versions are vectorised and parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu {

class ThreadPool;

enum class ClusterMetric {
  kCosine,        // argmax <k,mu>/(|k||mu|)   (ClusterKV)
  kL2,            // argmin |k - mu|^2         (ablation)
  kInnerProduct,  // argmax <k,mu>             (ablation)
};

// One independent k-means problem: n keys of `dim` elements, row i at
// keys + i*stride elements of `dtype` (kF32, kF16 or kBF16).
struct KMeansProblem {
  const void* keys = nullptr;
  DType dtype = DType::kF16;
  int64_t stride = 0;
  int64_t n = 0;
  int dim = 0;
  int k = 1;  // requested clusters, 1 <= k <= n
  int max_iters = 20;
  uint64_t seed = 0;
  ClusterMetric metric = ClusterMetric::kCosine;
};

// Contract (exactly; the fast path must give the same assignments):
//  1. Initial centroids: the keys at k distinct indices chosen by a partial
//     Fisher-Yates shuffle of 0..n-1 driven by SplitMix64(seed).
//  2. For it = 1..max_iters: assign every key to the best centroid (ties:
//     lowest cluster index); then every non-empty cluster's centroid becomes
//     the mean of its members' keys (unnormalised; empty clusters keep their
//     previous centroid); stop after an iteration where no assignment
//     changed (the first iteration always counts as a change).
//  3. Clusters still empty at the end are dropped and the rest renumbered in
//     their original order, so every output cluster has >= 1 member.
struct KMeansResult {
  int k = 0;                        // clusters in the output (<= requested)
  int iterations = 0;               // assignment passes run
  bool converged = false;           // stopped because nothing changed
  std::vector<float> centroids;     // [k][dim]
  std::vector<int32_t> assignment;  // [n], values in [0, k)
  std::vector<int32_t> sizes;       // [k], all >= 1
  // Keys scored against every centroid, summed over iterations: n per
  // iteration in the reference; the fast path skips keys whose assignment
  // provably cannot change (kmeans.cc).
  int64_t key_scorings = 0;
};

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

namespace ref {
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
}  // namespace ref

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

}  // namespace ckv::kernels::cpu
