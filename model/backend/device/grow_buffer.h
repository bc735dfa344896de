// Buffers of the device backend's helpers that only grow: a pinned host
// buffer or a device buffer, reallocated at max(need, twice its size) with
// its contents dropped. Work that used the old buffer must be finished
// (HostFree and Free wait for it anyway, as CUDA's do).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"

namespace ckv {

struct PinnedBuffer {
  char* host = nullptr;
  int64_t bytes = 0;
};
struct DeviceBuffer {
  kernels::device::DevPtr ptr;
  int64_t bytes = 0;
};

absl::Status Grow(kernels::device::Runtime& rt, int64_t need, PinnedBuffer* b);
absl::Status Grow(kernels::device::Runtime& rt, int64_t need, DeviceBuffer* b);
// Frees it (errors ignored: its owner is going away) and empties it.
void Release(kernels::device::Runtime& rt, PinnedBuffer* b);
void Release(kernels::device::Runtime& rt, DeviceBuffer* b);

}  // namespace ckv
