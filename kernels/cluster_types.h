// The argument and result types of the clustered-KV ops (k-means) shared
// by the reference (kernels/ref/cluster.h), the CPU's fast path
// (kernels/cpu/cluster_ops.h) and device kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace ckv::kernels {

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

}  // namespace ckv::kernels
