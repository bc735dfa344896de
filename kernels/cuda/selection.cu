#include "kernels/cuda/selection.h"

#include <climits>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

constexpr int kMaxDim = 512;
constexpr int kScoreThreads = 256;
constexpr int kSortThreads = 1024;

// KV head of selection s.
__device__ __forceinline__ int KvHeadOf(const ClusterSelectParams& p, int s) {
  return p.per_kv_head ? s : s / (p.n_q_heads / p.n_kv_heads);
}

__device__ __forceinline__ int ClustersOf(const ClusterSelectParams& p,
                                          int g) {
  return min(p.n_clusters[g], p.max_clusters);
}

// grid n_sel: the selection's query (or group sum) in shared memory, then
// one warp per cluster.
__global__ void __launch_bounds__(kScoreThreads)
    ScoresKernel(ClusterSelectParams p) {
  __shared__ float qs[kMaxDim];
  const int s = blockIdx.x, g = KvHeadOf(p, s);
  const int group = p.n_q_heads / p.n_kv_heads;
  for (int d = threadIdx.x; d < p.dim; d += blockDim.x) {
    if (p.per_kv_head) {
      float sum = 0.0f;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        sum += p.q[int64_t{h} * p.dim + d];
      }
      qs[d] = sum;
    } else {
      qs[d] = p.q[int64_t{s} * p.dim + d];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const float* cent = p.centroids + g * p.centroid_stride;
  const int n_c = ClustersOf(p, g);
  for (int c = threadIdx.x >> 5; c < n_c; c += warps) {
    float part = 0.0f;
    for (int d = lane; d < p.dim; d += 32) {
      part += qs[d] * cent[int64_t{c} * p.dim + d];
    }
    part = detail::WarpSum(part);
    if (lane == 0) p.scores[int64_t{s} * p.max_clusters + c] = part;
  }
}

// Sorted-before: higher score, then lower stored index.
__device__ __forceinline__ bool Before(const float* key, const int* idx,
                                       int a, int b) {
  return key[a] > key[b] || (key[a] == key[b] && idx[a] < idx[b]);
}

// Bitonic sort of n_pow2 (score, index) pairs into Before order.
__device__ void BitonicSort(float* key, int* idx, int n_pow2) {
  for (int k = 2; k <= n_pow2; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) {
        const int l = i ^ j;
        if (l <= i) continue;
        const bool ascending = (i & k) == 0;
        if (ascending ? Before(key, idx, l, i) : Before(key, idx, i, l)) {
          const float tk = key[i];
          key[i] = key[l];
          key[l] = tk;
          const int ti = idx[i];
          idx[i] = idx[l];
          idx[l] = ti;
        }
      }
      __syncthreads();
    }
  }
}

// pre[i] = rows of sorted clusters 0..i-1 (exclusive prefix of sizes).
// Each thread scans a contiguous chunk; chunk totals are scanned across the
// block (Hillis-Steele).
__device__ void PrefixSizes(const int* idx, const int32_t* off, int n_c,
                            int n_pow2, int* pre) {
  __shared__ int part[kSortThreads];
  const int per = (n_pow2 + blockDim.x - 1) / blockDim.x;
  const int lo = threadIdx.x * per, hi = min(n_c, lo + per);
  int local = 0;
  for (int i = lo; i < hi; ++i) local += off[idx[i] + 1] - off[idx[i]];
  part[threadIdx.x] = local;
  __syncthreads();
  for (int o = 1; o < blockDim.x; o <<= 1) {
    const int v = threadIdx.x >= o ? part[threadIdx.x - o] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int run = part[threadIdx.x] - local;
  for (int i = lo; i < hi; ++i) {
    pre[i] = run;
    run += off[idx[i] + 1] - off[idx[i]];
  }
  __syncthreads();
}

// grid n_sel; dynamic shared 12 * n_pow2 bytes (key, idx, pre).
__global__ void __launch_bounds__(kSortThreads)
    SortSelectKernel(ClusterSelectParams p, int n_pow2) {
  extern __shared__ float key[];
  int* idx = reinterpret_cast<int*>(key + n_pow2);
  int* pre = idx + n_pow2;
  __shared__ int n_sel;
  const int s = blockIdx.x, g = KvHeadOf(p, s), n_c = ClustersOf(p, g);
  const int64_t row0 = int64_t{s} * p.max_clusters;
  for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) {
    key[i] = i < n_c ? p.scores[row0 + i] : -INFINITY;
    idx[i] = i < n_c ? i : INT_MAX;
  }
  if (threadIdx.x == 0) n_sel = 0;
  __syncthreads();
  BitonicSort(key, idx, n_pow2);
  const int32_t* off = p.offsets + g * p.offsets_stride;
  PrefixSizes(idx, off, n_c, n_pow2, pre);
  const int64_t total = n_c > 0 ? off[n_c] - off[0] : 0;
  const int64_t budget = min(p.budget, total);
  for (int i = threadIdx.x; i < n_c; i += blockDim.x) {
    const int64_t size = off[idx[i] + 1] - off[idx[i]];
    const bool sel = pre[i] < budget;
    p.order[row0 + i] = idx[i];
    p.takes[row0 + i] = sel ? static_cast<int32_t>(min(size, budget - pre[i]))
                            : 0;
    if (sel && (i + 1 == n_c || pre[i + 1] >= budget)) n_sel = i + 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    p.n_selected[s] = n_sel;
    p.n_rows[s] = static_cast<int32_t>(budget);
  }
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int32_t* mem = p.members + g * p.members_stride;
  int32_t* rows = p.rows + s * p.rows_stride;
  for (int i = threadIdx.x >> 5; i < n_sel; i += warps) {
    const int c = idx[i];
    const int64_t take = min(int64_t{off[c + 1] - off[c]}, budget - pre[i]);
    for (int64_t r = lane; r < take; r += 32) rows[pre[i] + r] = mem[off[c] + r];
  }
}

int NextPow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

bool Valid(const ClusterSelectParams& p) {
  return p.n_q_heads > 0 && p.n_kv_heads > 0 &&
         p.n_q_heads % p.n_kv_heads == 0 && p.dim > 0 && p.dim <= kMaxDim &&
         p.max_clusters >= 0 && p.max_clusters <= kMaxSelectClusters &&
         p.budget >= 0 && p.rows_stride >= p.budget;
}

}  // namespace

cudaError_t SelectClusters(const ClusterSelectParams& p, cudaStream_t stream) {
  if (!Valid(p)) return cudaErrorInvalidValue;
  const int n_sel = p.per_kv_head ? p.n_kv_heads : p.n_q_heads;
  ScoresKernel<<<n_sel, kScoreThreads, 0, stream>>>(p);
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const int n_pow2 = NextPow2(p.max_clusters);
  const size_t bytes = size_t{12} * n_pow2;
  CKV_CUDA_RETURN_IF_ERROR(detail::AllowSharedBytes(SortSelectKernel, bytes));
  SortSelectKernel<<<n_sel, kSortThreads, bytes, stream>>>(p, n_pow2);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
