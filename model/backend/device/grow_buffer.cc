#include "model/backend/device/grow_buffer.h"

#include <algorithm>

namespace ckv {

namespace {
constexpr int64_t kMinBytes = 64;
}  // namespace

absl::Status Grow(kernels::device::Runtime& rt, int64_t need, PinnedBuffer* b) {
  if (need <= b->bytes) return absl::OkStatus();
  const int64_t bytes = std::max({need, 2 * b->bytes, kMinBytes});
  Release(rt, b);
  auto p = rt.HostAllocPinned(bytes);
  if (!p.ok()) return p.status();
  b->host = static_cast<char*>(*p);
  b->bytes = bytes;
  return absl::OkStatus();
}

absl::Status Grow(kernels::device::Runtime& rt, int64_t need, DeviceBuffer* b) {
  if (need <= b->bytes) return absl::OkStatus();
  const int64_t bytes = std::max({need, 2 * b->bytes, kMinBytes});
  Release(rt, b);
  auto p = rt.Malloc(bytes);
  if (!p.ok()) return p.status();
  b->ptr = *p;
  b->bytes = bytes;
  return absl::OkStatus();
}

void Release(kernels::device::Runtime& rt, PinnedBuffer* b) {
  if (b->host != nullptr) rt.HostFree(b->host).IgnoreError();
  *b = PinnedBuffer{};
}

void Release(kernels::device::Runtime& rt, DeviceBuffer* b) {
  if (!b->ptr.null()) rt.Free(b->ptr).IgnoreError();
  *b = DeviceBuffer{};
}

}  // namespace ckv
