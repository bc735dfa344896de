#include "kernels/cuda/cache_ops.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

namespace th = ::ckv::kernels::device::threads;

constexpr int kThreads = 256;
constexpr int32_t kMaxItemsPerLaunch = 65535;  // gridDim.y

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(detail::DivUp(n, kThreads), 1, 1 << 16));
}

__device__ th::CacheView CacheViewOf(const th::CacheItem& c) {
  th::CacheView v;
  v.seg_size = reinterpret_cast<const int64_t*>(c.seg_size);
  v.seg_block = reinterpret_cast<const int32_t*>(c.seg_block);
  v.seg_keys = reinterpret_cast<const uint16_t* const*>(c.seg_keys);
  v.seg_values = reinterpret_cast<const uint16_t* const*>(c.seg_values);
  v.member_last = reinterpret_cast<const int64_t*>(c.member_last);
  v.slot = reinterpret_cast<int32_t*>(c.slot);
  v.last_used = reinterpret_cast<int64_t*>(c.last_used);
  v.size = reinterpret_cast<int32_t*>(c.size);
  v.next_page = reinterpret_cast<int32_t*>(c.next_page);
  v.free_stack = reinterpret_cast<int32_t*>(c.free_stack);
  v.counters = reinterpret_cast<th::CacheCounters*>(c.counters);
  v.keys = reinterpret_cast<uint16_t*>(c.keys);
  v.values = reinterpret_cast<uint16_t*>(c.values);
  v.page_pos = reinterpret_cast<int64_t*>(c.page_pos);
  v.requests = reinterpret_cast<th::CacheRequest*>(c.requests);
  th::CopyScalars(c, &v);
  return v;
}

// Plan p of an item, viewed on the device.
struct Plans {
  const th::RowListItem* lists;
  __device__ th::RowListView operator()(int32_t p) const {
    return th::ViewOf(lists[p], th::DeviceAddressMap{});
  }
};

__device__ Plans PlansOf(const th::CacheItem& c) {
  return Plans{reinterpret_cast<const th::RowListItem*>(c.lists)};
}

__global__ void RequestsKernel(const th::CacheItem* items) {
  if (threadIdx.x != 0) return;
  const th::CacheItem& c = items[blockIdx.x];
  th::CacheRequests(CacheViewOf(c), PlansOf(c));
}

__global__ void ResolveKernel(const th::CacheItem* items) {
  if (threadIdx.x == 0) th::CacheResolve(CacheViewOf(items[blockIdx.x]));
}

// Item blockIdx.y, its request slots over the x threads.
__global__ void FetchKernel(const th::CacheItem* items) {
  const th::CacheItem& c = items[blockIdx.y];
  if (c.n_plans <= 0) return;
  const th::CacheView v = CacheViewOf(c);
  const th::RowListView table = PlansOf(c)(0);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       r < c.max_requests; r += int64_t{gridDim.x} * blockDim.x) {
    th::CacheFetch(v, table, r);
  }
}

// Item blockIdx.y, its plans' slots (plan-major) over the x threads.
__global__ void FillKernel(const th::CacheItem* items) {
  const th::CacheItem& c = items[blockIdx.y];
  if (c.n_plans <= 0) return;
  const th::CacheView v = CacheViewOf(c);
  const Plans plans = PlansOf(c);
  const int64_t per = plans(0).max_out;
  if (per <= 0) return;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       t < per * c.n_plans; t += int64_t{gridDim.x} * blockDim.x) {
    th::CacheFill(v, plans(static_cast<int32_t>(t / per)), t % per);
  }
}

__global__ void EvictKernel(const th::CacheItem* items) {
  if (threadIdx.x == 0) th::CacheEvict(CacheViewOf(items[blockIdx.x]));
}

}  // namespace

cudaError_t CacheListsBatch(const th::CacheItem* items, int32_t n_items,
                            int64_t max_requests, int64_t max_slots,
                            cudaStream_t stream) {
  if (n_items < 0 || max_requests < 0 || max_slots < 0) {
    return cudaErrorInvalidValue;
  }
  for (int32_t base = 0; base < n_items; base += kMaxItemsPerLaunch) {
    const th::CacheItem* chunk = items + base;
    const int32_t n = std::min(kMaxItemsPerLaunch, n_items - base);
    RequestsKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    ResolveKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    const dim3 fetch(GridFor(max_requests), static_cast<unsigned>(n));
    FetchKernel<<<fetch, kThreads, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    const dim3 fill(GridFor(max_slots), static_cast<unsigned>(n));
    FillKernel<<<fill, kThreads, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    EvictKernel<<<n, 32, 0, stream>>>(chunk);
    CKV_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return cudaSuccess;
}

}  // namespace ckv::kernels::cuda
