#include "kernels/cuda/quest.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// grid (pages, n_heads): thread d reduces channel d over the page's rows
// (coalesced across d).
template <typename T>
__global__ void BoundsKernel(const T* keys, int64_t head_stride,
                             int64_t row_stride, int64_t n, int dim,
                             int page_size, float* page_min,
                             float* page_max) {
  const int64_t page = blockIdx.x, n_pages = gridDim.x;
  const int h = blockIdx.y;
  const T* base = keys + h * head_stride;
  const int64_t begin = page * page_size;
  const int64_t end = min(n, begin + page_size);
  const int64_t out = (h * n_pages + page) * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) {
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = begin; i < end; ++i) {
      const float x = detail::ToF32(base[i * row_stride + d]);
      lo = fminf(lo, x);
      hi = fmaxf(hi, x);
    }
    page_min[out + d] = lo;
    page_max[out + d] = hi;
  }
}

// grid (ceil(n_pages / warps), n_q_heads): one warp per page.
__global__ void ScoresKernel(const float* __restrict__ q, int group,
                             const float* __restrict__ page_min,
                             const float* __restrict__ page_max,
                             int64_t n_pages, int dim, float* scores) {
  const int h = blockIdx.y, lane = threadIdx.x & 31;
  const int64_t page =
      int64_t{blockIdx.x} * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (page >= n_pages) return;
  const int64_t off = (int64_t{h / group} * n_pages + page) * dim;
  const float* qh = q + int64_t{h} * dim;
  float acc = 0.0f;
  for (int d = lane; d < dim; d += 32) {
    acc += fmaxf(qh[d] * page_max[off + d], qh[d] * page_min[off + d]);
  }
  acc = detail::WarpSum(acc);
  if (lane == 0) scores[int64_t{h} * n_pages + page] = acc;
}

}  // namespace

cudaError_t QuestPageBounds(const void* keys, DType dtype, int64_t head_stride,
                            int64_t row_stride, int n_heads, int64_t n,
                            int dim, int page_size, float* page_min,
                            float* page_max, cudaStream_t stream) {
  if (n < 0 || dim <= 0 || page_size <= 0 || n_heads <= 0 ||
      n_heads > 65535) {
    return cudaErrorInvalidValue;
  }
  const int64_t pages = detail::DivUp(n, page_size);
  if (pages == 0) return cudaSuccess;
  if (pages > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(pages), n_heads);
  const int threads = std::min(kThreads, (dim + 31) / 32 * 32);
  return detail::DispatchKvType(dtype, [&](auto tag) {
    using T = decltype(tag);
    BoundsKernel<T><<<grid, threads, 0, stream>>>(
        static_cast<const T*>(keys), head_stride, row_stride, n, dim,
        page_size, page_min, page_max);
    return cudaGetLastError();
  });
}

cudaError_t QuestScores(const float* q, int n_q_heads, int n_kv_heads,
                        const float* page_min, const float* page_max,
                        int64_t n_pages, int dim, float* scores,
                        cudaStream_t stream) {
  if (n_q_heads <= 0 || n_kv_heads <= 0 || n_q_heads % n_kv_heads != 0 ||
      n_q_heads > 65535 || n_pages < 0 || dim <= 0) {
    return cudaErrorInvalidValue;
  }
  if (n_pages == 0) return cudaSuccess;
  const int warps = kThreads / 32;
  const dim3 grid(static_cast<unsigned>(detail::DivUp(n_pages, warps)),
                  n_q_heads);
  ScoresKernel<<<grid, kThreads, 0, stream>>>(q, n_q_heads / n_kv_heads,
                                             page_min, page_max, n_pages, dim,
                                             scores);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
