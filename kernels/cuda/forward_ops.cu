#include "kernels/cuda/forward_ops.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(detail::DivUp(n, kThreads), 1, 1 << 16));
}

__global__ void AddKernel(float* x, const float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += y[i];
  }
}

__global__ void AddBiasKernel(float* x, const float* __restrict__ bias,
                              int64_t total, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] += bias[i % n];
  }
}

__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

// One block per item; 16-byte units when the item allows, else bytes.
__global__ void ScatterKernel(const char* __restrict__ src,
                              const ScatterItem* __restrict__ items) {
  const ScatterItem it = items[blockIdx.x];
  const char* from = src + it.from;
  char* to = reinterpret_cast<char*>(it.dst);
  const bool wide = (reinterpret_cast<uintptr_t>(from) | it.dst |
                     static_cast<uint64_t>(it.bytes)) %
                        16 ==
                    0;
  if (wide) {
    const int64_t units = it.bytes / 16;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      reinterpret_cast<uint4*>(to)[u] = reinterpret_cast<const uint4*>(from)[u];
    }
    return;
  }
  for (int64_t b = threadIdx.x; b < it.bytes; b += blockDim.x) to[b] = from[b];
}

// kernels::F32ToF16's bits: IEEE round-to-nearest-even (overflow to inf),
// NaN as sign | 0x7e00.
__device__ __forceinline__ uint16_t HostF16Bits(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u);
  }
  return __half_as_ushort(__float2half_rn(f));
}

// kernels::F32ToBF16's bits (round to nearest even; NaN keeps its top bits).
__device__ __forceinline__ uint16_t HostBf16Bits(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  }
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// Block i appends item i; its threads stride over the n_kv * head_dim
// elements of K and of V.
__global__ void AppendKernel(const float* __restrict__ k,
                             const float* __restrict__ v,
                             const AppendItem* __restrict__ items, int n_kv,
                             int head_dim, bool bf16) {
  const AppendItem it = items[blockIdx.x];
  const int64_t width = int64_t{n_kv} * head_dim;
  for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
    const int64_t h = e / head_dim, d = e % head_dim;
    const float kf = k[it.src_row * width + e];
    const float vf = v[it.src_row * width + e];
    const uint16_t kb = bf16 ? HostBf16Bits(kf) : HostF16Bits(kf);
    const uint16_t vb = bf16 ? HostBf16Bits(vf) : HostF16Bits(vf);
    const int64_t at = h * it.head_stride + d * 2;
    *reinterpret_cast<uint16_t*>(it.k_dst + at) = kb;
    *reinterpret_cast<uint16_t*>(it.v_dst + at) = vb;
    reinterpret_cast<uint16_t*>(it.k_copy)[e] = kb;
    reinterpret_cast<uint16_t*>(it.v_copy)[e] = vb;
  }
}

}  // namespace

cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t AddBias(float* x, const float* bias, int64_t rows, int64_t n,
                    cudaStream_t stream) {
  if (rows < 0 || n <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(rows * n), kThreads, 0, stream>>>(x, bias, rows * n,
                                                            n);
  return cudaGetLastError();
}

cudaError_t SoftCap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n < 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  SoftCapKernel<<<GridFor(n), kThreads, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

cudaError_t ScatterItems(const char* src, const ScatterItem* items, int64_t n,
                         cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  ScatterKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(src, items);
  return cudaGetLastError();
}

cudaError_t AppendRows(const float* k, const float* v, const AppendItem* items,
                       int64_t n, int n_kv, int head_dim, bool bf16,
                       cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff || n_kv <= 0 || head_dim <= 0) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  AppendKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(k, v, items, n_kv,
                                                             head_dim, bf16);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
