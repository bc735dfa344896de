// Regions that live for one step: a caller that does not wait for its
// device work before the next call (the device planner's deferred calls)
// takes each call's buffers here, and nothing taken is reused or freed
// before Reset, which its owner calls after the step's last wait. A chunk
// too small for a request is kept and a bigger one added (freeing would
// wait for the device); Reset merges them into one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/device/grow_buffer.h"

namespace ckv {

template <class Buffer>
class StepChunks {
 public:
  // A 64-byte aligned region of `bytes` until Reset.
  absl::StatusOr<Buffer> Take(kernels::device::Runtime& rt, int64_t bytes) {
    bytes = (std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
    while (current_ < chunks_.size() &&
           used_ + bytes > chunks_[current_].bytes) {
      ++current_;
      used_ = 0;
    }
    if (current_ == chunks_.size()) {
      Buffer b;
      const int64_t last = chunks_.empty() ? 0 : chunks_.back().bytes;
      const absl::Status s = Grow(rt, std::max(bytes, 2 * last), &b);
      if (!s.ok()) return s;
      chunks_.push_back(b);
      used_ = 0;
    }
    const Buffer r = Region(chunks_[current_], used_, bytes);
    used_ += bytes;
    return r;
  }

  // Every region free again (the device is done with them).
  void Reset(kernels::device::Runtime& rt) {
    current_ = 0;
    used_ = 0;
    if (chunks_.size() < 2) return;
    int64_t total = 0;
    for (const Buffer& b : chunks_) total += b.bytes;
    ReleaseAll(rt);
    Buffer b;
    if (Grow(rt, total, &b).ok()) chunks_.push_back(b);
  }

  void ReleaseAll(kernels::device::Runtime& rt) {
    for (Buffer& b : chunks_) Release(rt, &b);
    chunks_.clear();
    current_ = 0;
    used_ = 0;
  }

 private:
  static PinnedBuffer Region(const PinnedBuffer& b, int64_t off, int64_t n) {
    return PinnedBuffer{b.host + off, n};
  }
  static DeviceBuffer Region(const DeviceBuffer& b, int64_t off, int64_t n) {
    return DeviceBuffer{b.ptr + off, n};
  }

  std::vector<Buffer> chunks_;
  size_t current_ = 0;
  int64_t used_ = 0;
};

}  // namespace ckv
