// Internal device helpers shared by the .cu files of kernels/cuda: element
// loads per KV dtype, warp/block reductions, dtype dispatch and error
// propagation. Not part of the public API (include only from .cu files).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

#define CKV_CUDA_RETURN_IF_ERROR(expr)        \
  do {                                        \
    const cudaError_t ckv_err_ = (expr);      \
    if (ckv_err_ != cudaSuccess) return ckv_err_; \
  } while (0)

// Element i of a row of T (float, __half or __nv_bfloat16), as F32.
__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ float LoadF32(const T* p, int64_t i) {
  return ToF32(p[i]);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  }
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
// gets the result. Uses 33 floats of static shared memory.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = blockDim.x >> 5;
    float s = lane < n_warps ? partial[lane] : 0.0f;
    s = WarpSum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

inline int64_t DivUp(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Calls f(T{}) with T the device element type of a KV/key dtype (F32, F16,
// BF16); other dtypes are cudaErrorInvalidValue.
template <typename F>
cudaError_t DispatchKvType(DType t, F&& f) {
  switch (t) {
    case DType::kF32:
      return f(float{});
    case DType::kF16:
      return f(__half{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    default:
      return cudaErrorInvalidValue;
  }
}

// Calls f(std::integral_constant-like tag) with kPer = ceil(head_dim / 32)
// rounded up to 1, 2, 4 or 8 (head_dim <= 256); larger is invalid.
template <int N>
struct PerLane {
  static constexpr int kValue = N;
};

template <typename F>
cudaError_t DispatchPerLane(int head_dim, F&& f) {
  if (head_dim <= 0) return cudaErrorInvalidValue;
  if (head_dim <= 32) return f(PerLane<1>{});
  if (head_dim <= 64) return f(PerLane<2>{});
  if (head_dim <= 128) return f(PerLane<4>{});
  if (head_dim <= 256) return f(PerLane<8>{});
  return cudaErrorInvalidValue;
}

// Raises a kernel's dynamic shared-memory limit when it needs > 48 KiB.
template <typename Kernel>
cudaError_t AllowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

}  // namespace ckv::kernels::cuda::detail
