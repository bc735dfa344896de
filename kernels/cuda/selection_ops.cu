#include "kernels/cuda/selection_ops.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

namespace th = ::ckv::kernels::device::threads;

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(detail::DivUp(n, kThreads), 1, 1 << 16));
}

__global__ void ScoreKernel(const float* __restrict__ q,
                            const uint16_t* __restrict__ panels, int64_t n,
                            int dim, float* scores, int64_t ld, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < total;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = t / n, c = t % n;
    scores[j * ld + c] = th::ScoreCluster(q + j * dim, panels, c, dim);
  }
}

__global__ void RecentKernel(th::SelectView v) { th::SelectRecent(v); }

__global__ void RankKernel(th::SelectView v) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < v.n;
       b += int64_t{gridDim.x} * blockDim.x) {
    th::SelectRank(v, b);
  }
}

__global__ void AvailKernel(th::SelectView v) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < v.n;
       b += int64_t{gridDim.x} * blockDim.x) {
    th::SelectAvail(v, b);
  }
}

__global__ void ScanKernel(th::SelectView v) { th::SelectScan(v); }

__global__ void WriteKernel(th::SelectView v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < v.n;
       i += int64_t{gridDim.x} * blockDim.x) {
    th::SelectWrite(v, i);
  }
}

}  // namespace

cudaError_t ScoreClusters(const float* q, int n_q, const uint16_t* panels,
                          int64_t n, int dim, float* scores, int64_t ld,
                          cudaStream_t stream) {
  if (n_q < 0 || n < 0 || dim <= 0 || ld < n) return cudaErrorInvalidValue;
  const int64_t total = int64_t{n_q} * n;
  if (total == 0) return cudaSuccess;
  ScoreKernel<<<GridFor(total), kThreads, 0, stream>>>(q, panels, n, dim,
                                                       scores, ld, total);
  return cudaGetLastError();
}

cudaError_t SelectBlocks(const th::SelectView& v, cudaStream_t stream) {
  if (v.n < 0 || v.n_segs < 0 || v.page_size <= 0) {
    return cudaErrorInvalidValue;
  }
  RecentKernel<<<1, 1, 0, stream>>>(v);
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (v.n > 0) {
    RankKernel<<<GridFor(v.n), kThreads, 0, stream>>>(v);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    AvailKernel<<<GridFor(v.n), kThreads, 0, stream>>>(v);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  ScanKernel<<<1, 1, 0, stream>>>(v);
  CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (v.n > 0) {
    WriteKernel<<<GridFor(v.n), kThreads, 0, stream>>>(v);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return cudaSuccess;
}

}  // namespace ckv::kernels::cuda
