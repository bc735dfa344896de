// Batched k-means over keys on the GPU (one problem per KV head, all with
// the same n, k and dim), following the contract of kernels::ref::KMeans
// (kernels/cpu/cluster_ops.h) step for step:
//  - KMeansAssign: every key to the best centroid, ties to the lowest
//    index. Cosine scores <k, mu> / |mu| (dividing by |k| too would not
//    change the argmax); inner product <k, mu>; L2 2<k, mu> - |mu|^2.
//    F32 arithmetic (a tiled GEMM with an argmax epilogue): keys whose two
//    best scores differ by F32 rounding may pick the other cluster than the
//    double-precision reference.
//  - KMeansUpdate: one block per (problem, 32-channel slice, cluster
//    chunk) walks the tokens (strided over warps) and sums its channels per
//    cluster in shared memory in 2^-24 fixed point (int64; integer atomics,
//    so the result is deterministic: no float atomics in any reduction); a
//    non-empty cluster's centroid becomes the mean, an empty one keeps its
//    previous centroid.
//  - KMeansRun: seeds -> centroids, then up to max_iters (assign, update)
//    rounds; a problem stops after a round in which no assignment changed
//    (the first always counts as a change). Everything stays on the device
//    (no host sync): finished problems skip the remaining rounds.
//  Step 3 of the contract (dropping empty clusters): KMeansCompact.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/device/op_tables.h"
#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

// Same values as cpu::ClusterMetric.
enum class KMeansMetric { kCosine = 0, kL2 = 1, kInnerProduct = 2 };

struct KMeansBatch {
  // Problem b's key i: keys + b * head_stride + i * row_stride elements of
  // dtype (kF32, kF16, kBF16).
  const void* keys = nullptr;
  DType dtype = DType::kF16;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int n_problems = 0;
  int64_t n = 0;  // keys per problem, < 2^31
  int dim = 0;
  int k = 0;  // clusters per problem, 1..n
  KMeansMetric metric = KMeansMetric::kCosine;
  float* centroids = nullptr;     // [n_problems][k][dim]
  int32_t* assignment = nullptr;  // [n_problems][n]
  int32_t* sizes = nullptr;       // [n_problems][k]
};

// Device workspace of KMeansAssign/KMeansRun for this batch.
size_t KMeansWorkspaceBytes(const KMeansBatch& b);

// One assignment pass. active: device [n_problems] flags (null: all);
// changed: device [n_problems], set to 1 for a problem where some key's
// cluster changed (never cleared here; null: not reported).
cudaError_t KMeansAssign(const KMeansBatch& b, const int32_t* active,
                         int32_t* changed, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream);

// One update pass over the current assignment (active as above).
cudaError_t KMeansUpdate(const KMeansBatch& b, const int32_t* active,
                         cudaStream_t stream);

// The whole loop. seeds: device [n_problems][k] distinct key indices
// (cpu::internal::KMeansSeeds gives the reference's). iterations: device
// [n_problems] rounds run per problem, and converged: device
// [n_problems] 1 when it stopped on no change (either may be null).
cudaError_t KMeansRun(const KMeansBatch& b, const int32_t* seeds, int max_iters,
                      void* workspace, size_t workspace_bytes,
                      int32_t* iterations, int32_t* converged,
                      cudaStream_t stream);

// Step 3 of the contract for problem 0 of a KMeansRun: the non-empty
// clusters in index order into the job result at `result`
// (device::KMeansResultLayout(n, k, dim)): header (k kept, iterations,
// key_scorings = n * iterations), centroids, sizes, and the assignment
// renumbered. remap: device int32 [k] scratch. iterations: device int32
// (KMeansRun's).
cudaError_t KMeansCompact(const KMeansBatch& b, const int32_t* iterations,
                          int32_t* remap, void* result, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
