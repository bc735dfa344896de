// ClusterKV selection on the GPU: centroid scores, an exact full sort,
// prefix sums of cluster sizes, the trim to the budget, and the per-head
// index lists of the selected rows. The semantics are those of
// PlanClusterKv (model/kv/selection.cc) with recent_tokens = 0: clusters in
// descending score order, ties by segment then cluster index; whole
// clusters while fewer than B rows are taken, the last one cut to its first
// rows (members ascend by position) so that exactly min(B, clustered rows)
// rows are chosen.
//
// Clusters of a KV head are stored in (segment, cluster) order, so the tie
// rule is "lower stored index first". The sort is a block-level bitonic
// sort of (score, index) pairs in shared memory with that comparator:
// exact and deterministic for any scores without NaN.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ckv::kernels::cuda {

// Most clusters one KV head may have (shared memory of the sort).
inline constexpr int kMaxSelectClusters = 8192;

struct ClusterSelectParams {
  const float* q = nullptr;  // [n_q_heads][dim]
  int n_q_heads = 0;
  int n_kv_heads = 0;     // divides n_q_heads
  int dim = 0;            // 1..512
  // false: one selection per query head h (from KV head h / group);
  // true: one per KV head, scored with the sum of its group's queries
  // (summed in F32 in head order, as the engine's per_kv_head path does).
  bool per_kv_head = false;
  // KV head g: centroids + g * centroid_stride, [n_clusters[g]][dim];
  // offsets + g * offsets_stride, [n_clusters[g] + 1] ascending;
  // cluster c's rows: (members + g * members_stride)[offsets[c] ..
  // offsets[c + 1]), ascending positions (the rows written to `rows`).
  const float* centroids = nullptr;
  int64_t centroid_stride = 0;
  const int32_t* n_clusters = nullptr;  // device [n_kv_heads]
  int max_clusters = 0;  // host bound >= every n_clusters[g], <= kMax...
  const int32_t* offsets = nullptr;
  int64_t offsets_stride = 0;
  const int32_t* members = nullptr;
  int64_t members_stride = 0;
  int64_t budget = 0;  // B
  // Outputs, per selection s (n_sel = per_kv_head ? n_kv_heads : n_q_heads),
  // each row of the [n_sel][max_clusters] arrays at s * max_clusters:
  float* scores = nullptr;     // q . centroid by stored cluster index
  int32_t* order = nullptr;    // all clusters of the head, sorted
  int32_t* takes = nullptr;    // rows taken from order[i] (0 if unselected)
  int32_t* n_selected = nullptr;  // [n_sel] selected = order[0..n)
  int32_t* rows = nullptr;     // [n_sel][rows_stride] selected rows, in
  int64_t rows_stride = 0;     // order of selection; rows_stride >= B
  int32_t* n_rows = nullptr;   // [n_sel] = min(B, rows of the KV head)
};

cudaError_t SelectClusters(const ClusterSelectParams& p, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
