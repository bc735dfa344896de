// First-fit allocation of ranges of [0, capacity) with coalescing frees, in
// whatever unit the caller counts (bytes of a pinned slab, bytes of a
// device pool). Not thread-safe: its owner locks.
#pragma once

#include <cstdint>
#include <map>

namespace ckv {

class RangeAllocator {
 public:
  explicit RangeAllocator(int64_t capacity = 0) { Grow(capacity); }

  // The offset of `size` (> 0) units, the lowest that fits, or -1.
  int64_t Allocate(int64_t size);
  // Returns [offset, offset + size) of an Allocate.
  void Free(int64_t offset, int64_t size);
  // Adds [capacity(), new_capacity) to the free ranges.
  void Grow(int64_t new_capacity);

  int64_t capacity() const { return capacity_; }
  int64_t used() const { return used_; }

 private:
  void AddFree(int64_t offset, int64_t size);

  std::map<int64_t, int64_t> free_;  // offset -> size, coalesced
  int64_t capacity_ = 0;
  int64_t used_ = 0;
};

}  // namespace ckv
