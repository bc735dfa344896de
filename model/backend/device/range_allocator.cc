#include "model/backend/device/range_allocator.h"

#include <iterator>

namespace ckv {

int64_t RangeAllocator::Allocate(int64_t size) {
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const int64_t off = it->first;
    const int64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_[off + size] = rest;
    used_ += size;
    return off;
  }
  return -1;
}

void RangeAllocator::Free(int64_t offset, int64_t size) {
  used_ -= size;
  AddFree(offset, size);
}

void RangeAllocator::Grow(int64_t new_capacity) {
  if (new_capacity <= capacity_) return;
  const int64_t old = capacity_;
  capacity_ = new_capacity;
  AddFree(old, new_capacity - old);
}

void RangeAllocator::AddFree(int64_t offset, int64_t size) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = size;
}

}  // namespace ckv
