// The pieces of the k-means contract (kernels/cluster_types.h) that the
// scalar reference and every fast path share, so that all follow it to the
// bit. They live in kernels/ref/cluster.cc, compiled once without ISA flags, so a
// given input always yields the same doubles whichever caller asks.
// Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cluster_types.h"

namespace ckv::kernels::ref::contract {

// Step 1 of the contract: min(k, n) distinct indices of [0, n) from a
// partial Fisher-Yates shuffle driven by SplitMix64(seed); index i of the
// result seeds cluster i.
std::vector<int64_t> KMeansSeeds(int64_t n, int k, uint64_t seed);

// 1 / |mu| in double (0 for a zero vector): the cosine normaliser.
double CentroidInvNorm(const float* mu, int dim);

// The exact assignment score of `key` against centroid `mu` (larger is
// better), in double with a fixed summation order:
//   kCosine:       <key, mu> * inv_norm  (inv_norm = CentroidInvNorm(mu);
//                  the key's own norm does not change the argmax)
//   kInnerProduct: <key, mu>
//   kL2:           -|key - mu|^2
// ref::KMeans assigns with it; the fast path uses it to settle every key
// whose F32 scores cannot separate the best cluster from the runner-up.
double ExactScore(ClusterMetric m, const float* key, const float* mu,
                  double inv_norm, int dim);

// Step 2's update: sizes[c] = members of c; every non-empty centroid c
// becomes the mean of its members' keys, summed in double in key order and
// rounded to F32; empty ones are left unchanged. keys: [n][dim].
void UpdateCentroids(const float* keys, int64_t n, int dim,
                     const int32_t* assignment, int k, float* centroids,
                     int32_t* sizes);

// Step 3: drops empty clusters (renumbering the rest in order) and fills
// out->k, centroids, assignment and sizes.
void FinishKMeans(int k, int dim, const std::vector<float>& centroids,
                  const std::vector<int32_t>& sizes,
                  const std::vector<int32_t>& assignment, KMeansResult* out);

}  // namespace ckv::kernels::ref::contract
