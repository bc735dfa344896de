// cache_lists on CUDA: the per-thread bodies of
// kernels/device/cache_threads.h (the functions the fake runs), one kernel
// per phase. Framework-free launcher; returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device/cache_threads.h"

namespace ckv::kernels::cuda {

// cache_lists over n_items items (CacheItem in device memory): requests,
// residency, fetches (max_requests: the most requests of an item), list
// entries (max_slots: the most plan slots of an item), evictions.
cudaError_t CacheListsBatch(const device::threads::CacheItem* items,
                            int32_t n_items, int64_t max_requests,
                            int64_t max_slots, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
