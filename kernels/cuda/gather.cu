#include "kernels/cuda/gather.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ float TableElement(const void* row, int64_t i) {
  return detail::LoadF32(static_cast<const T*>(row), i);
}

// Q8_0 element i: block i/32 is an F16 scale (2 bytes) then 32 int8.
__device__ float Q8Element(const void* row, int64_t i) {
  const auto* b = static_cast<const uint8_t*>(row) + (i / 32) * 34;
  const unsigned short bits = static_cast<unsigned short>(b[0] | (b[1] << 8));
  const float d = __half2float(__ushort_as_half(bits));
  return d * static_cast<float>(static_cast<int8_t>(b[2 + i % 32]));
}

// One block per token; threads walk the row.
template <typename T, bool kQ8>
__global__ void EmbeddingKernel(const char* __restrict__ table,
                                int64_t row_bytes, int64_t n_vocab, int64_t dim,
                                const int32_t* __restrict__ tokens, float scale,
                                int64_t out_stride, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t id = tokens[t];
  float* o = out + t * out_stride;
  const bool valid = id >= 0 && id < n_vocab;
  const void* row = table + (valid ? id : 0) * row_bytes;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    if (!valid) {
      o[i] = 0.0f;
    } else if constexpr (kQ8) {
      o[i] = Q8Element(row, i) * scale;
    } else {
      o[i] = TableElement<T>(row, i) * scale;
    }
  }
}

// One warp per row, grid-stride over rows; V is the access unit.
template <typename V>
__global__ void GatherRowsKernel(const char* src, int64_t src_stride,
                                 const int32_t* __restrict__ src_rows,
                                 char* dst, int64_t dst_stride,
                                 const int32_t* __restrict__ dst_rows,
                                 int64_t n, int64_t units) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; i < n;
       i += warps) {
    const V* s = reinterpret_cast<const V*>(src + src_rows[i] * src_stride);
    const int64_t d_row = dst_rows != nullptr ? dst_rows[i] : i;
    V* d = reinterpret_cast<V*>(dst + d_row * dst_stride);
    for (int64_t u = lane; u < units; u += 32) d[u] = s[u];
  }
}

bool Aligned(const void* p, int64_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

template <typename V>
cudaError_t LaunchGather(const void* src, int64_t src_stride,
                         const int32_t* src_rows, void* dst, int64_t dst_stride,
                         const int32_t* dst_rows, int64_t n, int64_t row_bytes,
                         cudaStream_t stream) {
  const int64_t blocks =
      std::clamp<int64_t>(detail::DivUp(n, kThreads / 32), 1, 4096);
  GatherRowsKernel<V><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const char*>(src), src_stride, src_rows,
      static_cast<char*>(dst), dst_stride, dst_rows, n,
      row_bytes / static_cast<int64_t>(sizeof(V)));
  return cudaGetLastError();
}

}  // namespace

cudaError_t EmbeddingGather(DType type, const void* table, int64_t n_vocab,
                            int64_t dim, const int32_t* tokens,
                            int64_t n_tokens, float scale, int64_t out_stride,
                            float* out, cudaStream_t stream) {
  const int64_t row_bytes = RowBytes(type, dim);
  if (dim <= 0 || n_tokens < 0 || row_bytes < 0 || n_tokens > 0x7fffffff ||
      out_stride < dim) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n_tokens);
  const char* base = static_cast<const char*>(table);
  if (type == DType::kQ8_0) {
    EmbeddingKernel<float, true><<<grid, kThreads, 0, stream>>>(
        base, row_bytes, n_vocab, dim, tokens, scale, out_stride, out);
    return cudaGetLastError();
  }
  return detail::DispatchKvType(type, [&](auto tag) {
    using T = decltype(tag);
    EmbeddingKernel<T, false><<<grid, kThreads, 0, stream>>>(
        base, row_bytes, n_vocab, dim, tokens, scale, out_stride, out);
    return cudaGetLastError();
  });
}

cudaError_t GatherRows(const void* src, int64_t src_stride,
                       const int32_t* src_rows, void* dst, int64_t dst_stride,
                       const int32_t* dst_rows, int64_t n, int64_t row_bytes,
                       cudaStream_t stream) {
  if (n < 0 || row_bytes < 0) return cudaErrorInvalidValue;
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  auto fits = [&](int64_t a) {
    return Aligned(src, a) && Aligned(dst, a) && src_stride % a == 0 &&
           dst_stride % a == 0 && row_bytes % a == 0;
  };
  if (fits(16)) {
    return LaunchGather<uint4>(src, src_stride, src_rows, dst, dst_stride,
                               dst_rows, n, row_bytes, stream);
  }
  if (fits(4)) {
    return LaunchGather<uint32_t>(src, src_stride, src_rows, dst, dst_stride,
                                  dst_rows, n, row_bytes, stream);
  }
  return LaunchGather<uint8_t>(src, src_stride, src_rows, dst, dst_stride,
                               dst_rows, n, row_bytes, stream);
}

}  // namespace ckv::kernels::cuda
