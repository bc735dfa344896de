#include "kernels/cuda/kmeans.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

// Assign: 64 keys x 64 centroids per tile, 16 dims per stage; thread
// (ty, tx) of 16x16 owns keys ty + 16i and centroids tx + 16j (i, j < 4).
constexpr int kTM = 64, kTN = 64, kTD = 16, kAssignThreads = 256;
// Update: 32 channels per block, clusters chunked to fit shared memory.
constexpr int kSlice = 32, kUpdateThreads = 512, kUpdateUnroll = 4;
constexpr size_t kUpdateSmemMax = 96 * 1024;

// Workspace: norms float2[n_problems][k] (1/|mu|, |mu|^2), then int32
// active, changed, iterations, converged [n_problems] each.
struct Workspace {
  float2* norms;
  int32_t* active;
  int32_t* changed;
  int32_t* iters;
  int32_t* conv;
};

size_t Align(size_t v) { return (v + 255) / 256 * 256; }

Workspace Carve(const KMeansBatch& b, void* base) {
  char* p = static_cast<char*>(base);
  Workspace w;
  w.norms = reinterpret_cast<float2*>(p);
  p += Align(sizeof(float2) * b.n_problems * b.k);
  const size_t ints = Align(sizeof(int32_t) * b.n_problems);
  w.active = reinterpret_cast<int32_t*>(p);
  w.changed = reinterpret_cast<int32_t*>(p + ints);
  w.iters = reinterpret_cast<int32_t*>(p + 2 * ints);
  w.conv = reinterpret_cast<int32_t*>(p + 3 * ints);
  return w;
}

// grid n_problems; one warp per centroid.
__global__ void NormsKernel(const float* __restrict__ centroids, int k, int dim,
                            float2* __restrict__ norms) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const float* base = centroids + int64_t{blockIdx.x} * k * dim;
  for (int c = threadIdx.x >> 5; c < k; c += warps) {
    double ss = 0.0;
    for (int d = lane; d < dim; d += 32) {
      ss += double{base[int64_t{c} * dim + d]} * base[int64_t{c} * dim + d];
    }
    for (int o = 16; o > 0; o >>= 1) {
      ss += __shfl_xor_sync(detail::kFullMask, ss, o);
    }
    if (lane == 0) {
      norms[int64_t{blockIdx.x} * k + c] =
          make_float2(ss > 0.0 ? static_cast<float>(1.0 / sqrt(ss)) : 0.0f,
                      static_cast<float>(ss));
    }
  }
}

__device__ __forceinline__ float Score(KMeansMetric m, float dot, float2 nm) {
  switch (m) {
    case KMeansMetric::kCosine:
      return dot * nm.x;
    case KMeansMetric::kL2:
      return 2.0f * dot - nm.y;
    default:
      return dot;
  }
}

// Stages keys [m0, m0+kTM) and centroids [n0, n0+kTN), dims [d0, d0+kTD),
// transposed ([dim][item]); zeros outside the problem.
template <typename T>
__device__ void StageTiles(const T* keys, int64_t row_stride, int64_t n,
                           const float* cent, int k, int dim, int64_t m0,
                           int n0, int d0, float (*ks)[kTM + 4],
                           float (*cs)[kTN + 4]) {
  for (int e = threadIdx.x; e < kTM * kTD; e += blockDim.x) {
    const int m = e / kTD, dd = e % kTD, d = d0 + dd;
    const int64_t row = m0 + m;
    ks[dd][m] =
        row < n && d < dim ? detail::ToF32(keys[row * row_stride + d]) : 0.0f;
    const int c = n0 + m;
    cs[dd][m] = c < k && d < dim ? cent[int64_t{c} * dim + d] : 0.0f;
  }
}

// Better of (s, a) and (s2, a2): higher score, then lower index.
__device__ __forceinline__ void Better(float s2, int a2, float& s, int& a) {
  if (s2 > s || (s2 == s && a2 < a)) {
    s = s2;
    a = a2;
  }
}

// grid (ceil(n / kTM), n_problems).
template <typename T>
__global__ void __launch_bounds__(kAssignThreads)
    AssignKernel(KMeansBatch b, const float2* __restrict__ norms,
                 const int32_t* active, int32_t* changed) {
  const int prob = blockIdx.y;
  if (active != nullptr && active[prob] == 0) return;
  __shared__ float ks[kTD][kTM + 4];
  __shared__ float cs[kTD][kTN + 4];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = int64_t{blockIdx.x} * kTM;
  const T* keys = static_cast<const T*>(b.keys) + prob * b.head_stride;
  const float* cent = b.centroids + int64_t{prob} * b.k * b.dim;
  const float2* nm = norms + int64_t{prob} * b.k;
  float best[4];
  int arg[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    best[i] = -INFINITY;
    arg[i] = 0;
  }
  for (int n0 = 0; n0 < b.k; n0 += kTN) {
    float acc[4][4] = {};
    for (int d0 = 0; d0 < b.dim; d0 += kTD) {
      __syncthreads();
      StageTiles<T>(keys, b.row_stride, b.n, cent, b.k, b.dim, m0, n0, d0, ks,
                    cs);
      __syncthreads();
#pragma unroll
      for (int dd = 0; dd < kTD; ++dd) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[i][j] += ks[dd][ty + 16 * i] * cs[dd][tx + 16 * j];
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // ascending c: strict > keeps the lowest
      const int c = n0 + tx + 16 * j;
      if (c >= b.k) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float s = Score(b.metric, acc[i][j], nm[c]);
        if (s > best[i]) {
          best[i] = s;
          arg[i] = c;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    for (int o = 8; o > 0; o >>= 1) {  // the 16 lanes sharing ty
      const float s2 = __shfl_xor_sync(detail::kFullMask, best[i], o);
      const int a2 = __shfl_xor_sync(detail::kFullMask, arg[i], o);
      Better(s2, a2, best[i], arg[i]);
    }
    const int64_t row = m0 + ty + 16 * i;
    if (tx == 0 && row < b.n) {
      int32_t* slot = b.assignment + prob * b.n + row;
      if (*slot != arg[i] && changed != nullptr) changed[prob] = 1;
      *slot = arg[i];
    }
  }
}

// Sums are fixed point (units of 2^-24, int64): integer atomics are
// associative, so the sums, the means and every later round are the same
// bits run to run whatever order the warps add in. Every F16 key is a
// multiple of 2^-24 (exact); F32/BF16 keys round to that grid once.
constexpr float kFixedScale = 16777216.0f;  // 2^24

// grid (n_problems, ceil(dim / 32), chunks); clusters [c0, c0 + kc).
template <typename T>
__global__ void __launch_bounds__(kUpdateThreads)
    UpdateKernel(KMeansBatch b, const int32_t* active, int kc) {
  const int prob = blockIdx.x;
  if (active != nullptr && active[prob] == 0) return;
  // [nc][kSlice] fixed-point sums, then int counts[nc].
  extern __shared__ unsigned long long sums[];
  const int c0 = blockIdx.z * kc, nc = min(kc, b.k - c0);
  int* counts = reinterpret_cast<int*>(sums + kc * kSlice);
  for (int e = threadIdx.x; e < nc * kSlice; e += blockDim.x) sums[e] = 0;
  for (int e = threadIdx.x; e < nc; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int ch = blockIdx.y * kSlice + lane;
  const bool in = ch < b.dim;
  const T* keys = static_cast<const T*>(b.keys) + prob * b.head_stride;
  const int32_t* asg = b.assignment + prob * b.n;
  const int64_t step = int64_t{blockDim.x >> 5} * kUpdateUnroll;
  for (int64_t i = int64_t{warp} * kUpdateUnroll; i < b.n; i += step) {
    int c[kUpdateUnroll];
    long long x[kUpdateUnroll];
#pragma unroll
    for (int u = 0; u < kUpdateUnroll; ++u) {
      c[u] = i + u < b.n ? asg[i + u] - c0 : -1;
      const bool mine = c[u] >= 0 && c[u] < nc;
      c[u] = mine ? c[u] : -1;
      const float v =
          mine && in ? detail::ToF32(keys[(i + u) * b.row_stride + ch]) : 0.0f;
      x[u] = __float2ll_rn(v * kFixedScale);
    }
#pragma unroll
    for (int u = 0; u < kUpdateUnroll; ++u) {
      if (c[u] < 0) continue;
      if (in) {
        atomicAdd(&sums[c[u] * kSlice + lane],
                  static_cast<unsigned long long>(x[u]));
      }
      if (lane == 0) atomicAdd(&counts[c[u]], 1);
    }
  }
  __syncthreads();
  float* cent = b.centroids + (int64_t{prob} * b.k + c0) * b.dim;
  for (int e = threadIdx.x; e < nc * kSlice; e += blockDim.x) {
    const int cl = e / kSlice, d = blockIdx.y * kSlice + e % kSlice;
    if (d < b.dim && counts[cl] > 0) {
      const double sum = static_cast<double>(static_cast<long long>(sums[e]));
      cent[int64_t{cl} * b.dim + d] =
          static_cast<float>(sum / kFixedScale / counts[cl]);
    }
  }
  if (blockIdx.y == 0) {
    for (int e = threadIdx.x; e < nc; e += blockDim.x) {
      b.sizes[int64_t{prob} * b.k + c0 + e] = counts[e];
    }
  }
}

// grid (k, n_problems): centroid c = key seeds[c], as F32.
template <typename T>
__global__ void SeedKernel(KMeansBatch b, const int32_t* __restrict__ seeds) {
  const int c = blockIdx.x, prob = blockIdx.y;
  const T* key = static_cast<const T*>(b.keys) + prob * b.head_stride +
                 int64_t{seeds[int64_t{prob} * b.k + c]} * b.row_stride;
  float* mu = b.centroids + (int64_t{prob} * b.k + c) * b.dim;
  for (int d = threadIdx.x; d < b.dim; d += blockDim.x) {
    mu[d] = detail::ToF32(key[d]);
  }
}

// One thread per problem: closes a round (see KMeansRun's contract).
__global__ void FinishRoundKernel(int n_problems, Workspace w) {
  const int prob = blockIdx.x * blockDim.x + threadIdx.x;
  if (prob >= n_problems || w.active[prob] == 0) return;
  ++w.iters[prob];
  if (w.changed[prob] == 0) {
    w.active[prob] = 0;
    w.conv[prob] = 1;
  }
  w.changed[prob] = 0;
}

// One thread: the new index of every cluster (-1: empty) and the header.
__global__ void RemapKernel(int64_t n, int k, const int32_t* __restrict__ sizes,
                            const int32_t* __restrict__ iterations,
                            int32_t* remap, device::KMeansHeader* header) {
  int32_t next = 0;
  for (int c = 0; c < k; ++c) remap[c] = sizes[c] > 0 ? next++ : -1;
  header->k = next;
  header->iterations = *iterations;
  header->key_scorings = n * int64_t{*iterations};
}

__global__ void CompactClustersKernel(int k, int dim,
                                      const float* __restrict__ centroids,
                                      const int32_t* __restrict__ sizes,
                                      const int32_t* __restrict__ remap,
                                      float* out_centroids,
                                      int32_t* out_sizes) {
  const int64_t total = int64_t{k} * dim;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = e / dim, d = e % dim;
    const int32_t to = remap[c];
    if (to < 0) continue;
    out_centroids[int64_t{to} * dim + d] = centroids[e];
    if (d == 0) out_sizes[to] = sizes[c];
  }
}

__global__ void RenumberKernel(int64_t n, const int32_t* __restrict__ asg,
                               const int32_t* __restrict__ remap,
                               int32_t* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = remap[asg[i]];
  }
}

bool Valid(const KMeansBatch& b) {
  return b.n_problems > 0 && b.n_problems <= 65535 && b.n > 0 &&
         b.n < (int64_t{1} << 31) && b.dim > 0 && b.k >= 1 && b.k <= b.n;
}

}  // namespace

size_t KMeansWorkspaceBytes(const KMeansBatch& b) {
  return Align(sizeof(float2) * b.n_problems * b.k) +
         4 * Align(sizeof(int32_t) * b.n_problems);
}

cudaError_t KMeansAssign(const KMeansBatch& b, const int32_t* active,
                         int32_t* changed, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  if (!Valid(b) || workspace_bytes < KMeansWorkspaceBytes(b)) {
    return cudaErrorInvalidValue;
  }
  const Workspace w = Carve(b, workspace);
  NormsKernel<<<b.n_problems, 256, 0, stream>>>(b.centroids, b.k, b.dim,
                                                w.norms);
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>(detail::DivUp(b.n, kTM)), b.n_problems);
  return detail::DispatchKvType(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    AssignKernel<T>
        <<<grid, kAssignThreads, 0, stream>>>(b, w.norms, active, changed);
    return cudaGetLastError();
  });
}

cudaError_t KMeansUpdate(const KMeansBatch& b, const int32_t* active,
                         cudaStream_t stream) {
  if (!Valid(b)) return cudaErrorInvalidValue;
  const int kc_max = static_cast<int>(kUpdateSmemMax / (kSlice * 8 + 4));
  const int kc = std::min(b.k, kc_max);
  const size_t bytes = size_t{8} * kc * kSlice + size_t{4} * kc;
  const dim3 grid(b.n_problems,
                  static_cast<unsigned>(detail::DivUp(b.dim, kSlice)),
                  static_cast<unsigned>(detail::DivUp(b.k, kc)));
  return detail::DispatchKvType(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto kernel = UpdateKernel<T>;
    CKV_CUDA_RETURN_IF_ERROR(detail::AllowSharedBytes(kernel, bytes));
    kernel<<<grid, kUpdateThreads, bytes, stream>>>(b, active, kc);
    return cudaGetLastError();
  });
}

cudaError_t KMeansRun(const KMeansBatch& b, const int32_t* seeds, int max_iters,
                      void* workspace, size_t workspace_bytes,
                      int32_t* iterations, int32_t* converged,
                      cudaStream_t stream) {
  if (!Valid(b) || workspace_bytes < KMeansWorkspaceBytes(b)) {
    return cudaErrorInvalidValue;
  }
  const Workspace w = Carve(b, workspace);
  const size_t ints = sizeof(int32_t) * b.n_problems;
  CKV_CUDA_RETURN_IF_ERROR(detail::DispatchKvType(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    SeedKernel<T><<<dim3(b.k, b.n_problems), 128, 0, stream>>>(b, seeds);
    return cudaGetLastError();
  }));
  // Every problem starts active (any non-zero flag is active).
  CKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.changed, 0, ints, stream));
  CKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.iters, 0, ints, stream));
  CKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.conv, 0, ints, stream));
  CKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.active, 0xff, ints, stream));
  CKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      b.assignment, 0xff, sizeof(int32_t) * b.n_problems * b.n, stream));
  for (int it = 0; it < std::max(1, max_iters); ++it) {
    CKV_CUDA_RETURN_IF_ERROR(KMeansAssign(b, w.active, w.changed, workspace,
                                          workspace_bytes, stream));
    CKV_CUDA_RETURN_IF_ERROR(KMeansUpdate(b, w.active, stream));
    FinishRoundKernel<<<static_cast<unsigned>(detail::DivUp(b.n_problems, 128)),
                        128, 0, stream>>>(b.n_problems, w);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (iterations != nullptr) {
    CKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(iterations, w.iters, ints,
                                             cudaMemcpyDeviceToDevice, stream));
  }
  if (converged != nullptr) {
    CKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(converged, w.conv, ints,
                                             cudaMemcpyDeviceToDevice, stream));
  }
  return cudaSuccess;
}

cudaError_t KMeansCompact(const KMeansBatch& b, const int32_t* iterations,
                          int32_t* remap, void* result, cudaStream_t stream) {
  if (!Valid(b) || result == nullptr || remap == nullptr) {
    return cudaErrorInvalidValue;
  }
  const device::KMeansLayout l = device::KMeansResultLayout(b.n, b.k, b.dim);
  char* r = static_cast<char*>(result);
  auto* header = reinterpret_cast<device::KMeansHeader*>(r);
  RemapKernel<<<1, 1, 0, stream>>>(b.n, b.k, b.sizes, iterations, remap,
                                   header);
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const int64_t cells = int64_t{b.k} * b.dim;
  const auto grid = [](int64_t n) {
    return static_cast<unsigned>(
        std::clamp<int64_t>(detail::DivUp(n, 256), 1, 1 << 16));
  };
  CompactClustersKernel<<<grid(cells), 256, 0, stream>>>(
      b.k, b.dim, b.centroids, b.sizes, remap,
      reinterpret_cast<float*>(r + l.centroids),
      reinterpret_cast<int32_t*>(r + l.sizes));
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  RenumberKernel<<<grid(b.n), 256, 0, stream>>>(
      b.n, b.assignment, remap, reinterpret_cast<int32_t*>(r + l.assignment));
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
