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

__global__ void AvailKernel(th::SelectView v) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < v.n;
       b += int64_t{gridDim.x} * blockDim.x) {
    th::SelectAvail(v, b);
  }
}

__global__ void TakeKernel(th::SelectView v) {
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < v.n;
       b += int64_t{gridDim.x} * blockDim.x) {
    th::SelectTake(v, b);
  }
}

__global__ void TotalsKernel(th::SelectView v) { th::SelectTotals(v); }

// Thread t of the batch: item i (thread_base's prefix), then the item's
// own thread (threads::ScoreItemThread: a (query, cluster) score, or a
// quest page's); offsets checked as the fake checks them (an out-of-range
// item is skipped, never read past).
__global__ void ScoreBatchKernel(ScoreBatch b) {
  const th::ScorePools pools{b.q_pool,      b.q_elems,    b.panel_pool,
                             b.panel_elems, b.score_pool, b.score_elems,
                             b.dim};
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       t < b.total_threads; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i =
        th::UpperBound(b.thread_base, 0, int64_t{b.n_items} + 1, t) - 1;
    if (i < 0 || i >= b.n_items) continue;
    const th::ScoreItem it = b.items[i];
    const int64_t local = t - b.thread_base[i];
    if (local >= th::ScoreItemThreads(it)) continue;
    th::ScoreItemThread(it, local, pools);
  }
}

// select_blocks_batch: item blockIdx.y (per-block phases, blocks on x) or
// blockIdx.x (the one-thread phases).
__device__ th::SelectView ItemView(const th::SelectItem* items, int64_t i) {
  return th::ViewOf(items[i], th::DeviceAddressMap{});
}

__global__ void RecentBatchKernel(const th::SelectItem* items) {
  if (threadIdx.x == 0) th::SelectRecent(ItemView(items, blockIdx.x));
}

__global__ void TotalsBatchKernel(const th::SelectItem* items) {
  if (threadIdx.x == 0) th::SelectTotals(ItemView(items, blockIdx.x));
}

// kPhase 0: rows before the recent range, 1: taken blocks written.
template <int kPhase>
__global__ void BlockBatchKernel(const th::SelectItem* items) {
  const th::SelectView v = ItemView(items, blockIdx.y);
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < v.n;
       b += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (kPhase == 0) {
      th::SelectAvail(v, b);
    } else {
      th::SelectTake(v, b);
    }
  }
}

__device__ th::RowListView ListView(const th::RowListItem* items, int64_t i) {
  return th::ViewOf(items[i], th::DeviceAddressMap{});
}

__global__ void RowRangesKernel(const th::RowListItem* items) {
  if (threadIdx.x == 0) th::RowListRanges(ListView(items, blockIdx.x));
}

// Item blockIdx.y, its plan slots over the x threads.
__global__ void RowFillKernel(const th::RowListItem* items) {
  const th::RowListView v = ListView(items, blockIdx.y);
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       b < v.max_out; b += int64_t{gridDim.x} * blockDim.x) {
    th::RowListFill(v, b);
  }
}

__global__ void GatherKernel(const th::QueryItem* items, float* pool,
                             int64_t pool_elems) {
  const th::QueryItem it = items[blockIdx.x];
  const int64_t nq = it.shared != 0 ? 1 : it.group;
  if (it.dst_offset < 0 ||
      it.dst_offset + int64_t{it.n_kv} * nq * it.hd > pool_elems) {
    return;
  }
  const float* src = reinterpret_cast<const float*>(it.src);
  const int64_t n = int64_t{it.n_kv} * it.hd;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    th::GatherQuery(it, src, pool + it.dst_offset, t / it.hd, t % it.hd);
  }
}

}  // namespace

cudaError_t GatherQueries(const th::QueryItem* items, int32_t n_items,
                          float* pool, int64_t pool_elems,
                          cudaStream_t stream) {
  if (n_items < 0 || pool_elems < 0) return cudaErrorInvalidValue;
  if (n_items == 0) return cudaSuccess;
  GatherKernel<<<n_items, kThreads, 0, stream>>>(items, pool, pool_elems);
  return cudaGetLastError();
}

cudaError_t ScoreClustersBatch(const ScoreBatch& b, cudaStream_t stream) {
  if (b.n_items < 0 || b.dim <= 0 || b.total_threads < 0) {
    return cudaErrorInvalidValue;
  }
  if (b.n_items == 0 || b.total_threads == 0) return cudaSuccess;
  ScoreBatchKernel<<<GridFor(b.total_threads), kThreads, 0, stream>>>(b);
  return cudaGetLastError();
}

cudaError_t SelectBlocksBatch(const th::SelectItem* items, int32_t n_items,
                              int64_t max_n, cudaStream_t stream) {
  if (n_items < 0 || max_n < 0) return cudaErrorInvalidValue;
  // The per-block kernels put the item on gridDim.y (at most 65535): more
  // items go in chunks, each launched as a batch of its own (items are
  // independent problems).
  constexpr int32_t kMaxItemsPerLaunch = 65535;
  for (int32_t base = 0; base < n_items; base += kMaxItemsPerLaunch) {
    const th::SelectItem* chunk = items + base;
    const int32_t n = std::min(kMaxItemsPerLaunch, n_items - base);
    RecentBatchKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    const dim3 grid(GridFor(max_n), static_cast<unsigned>(n));
    BlockBatchKernel<0><<<grid, kThreads, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    BlockBatchKernel<1><<<grid, kThreads, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    TotalsBatchKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return cudaSuccess;
}

cudaError_t RowListsBatch(const th::RowListItem* items, int32_t n_items,
                          int64_t max_slots, cudaStream_t stream) {
  if (n_items < 0 || max_slots < 0) return cudaErrorInvalidValue;
  constexpr int32_t kMaxItemsPerLaunch = 65535;  // gridDim.y
  for (int32_t base = 0; base < n_items; base += kMaxItemsPerLaunch) {
    const th::RowListItem* chunk = items + base;
    const int32_t n = std::min(kMaxItemsPerLaunch, n_items - base);
    RowRangesKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    const dim3 grid(GridFor(max_slots), static_cast<unsigned>(n));
    RowFillKernel<<<grid, kThreads, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return cudaSuccess;
}

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
    AvailKernel<<<GridFor(v.n), kThreads, 0, stream>>>(v);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    TakeKernel<<<GridFor(v.n), kThreads, 0, stream>>>(v);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  TotalsKernel<<<1, 1, 0, stream>>>(v);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
