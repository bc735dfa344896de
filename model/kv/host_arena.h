// Where the host tier's K,V rows live. A segment's rows (model/kv/segment.h)
// come from a HostArena: on the CPU backend plain heap memory; on a device
// backend mapped-pinned slabs of its runtime (model/backend/device/
// pinned_arena.h), so that the device copies rows straight from the
// segments (async copies need pinned memory) instead of through a staging
// buffer. The backend that runs a store's steps supplies its arena
// (Backend::store_env(), model/kv/store_env.h); a store forked from another
// shares its arena.
#pragma once

#include <cstdint>
#include <memory>

namespace ckv {

class HostArena {
 public:
  virtual ~HostArena() = default;

  // `bytes` (> 0) of host memory, 64-byte aligned, contents undefined.
  // Never fails for lack of the arena's own memory: a pinned arena that has
  // reached its limit hands out heap memory instead (Contains() then says
  // false and the device stages those rows). Only a failed heap allocation
  // throws, as a std::vector's would.
  virtual void* Allocate(int64_t bytes) = 0;
  // Returns a block of Allocate(bytes). Thread-safe, as Allocate is.
  virtual void Free(void* p, int64_t bytes) = 0;
  // True when [p, p + bytes) lies in one block of this arena's own (pinned)
  // memory.
  virtual bool Contains(const void* p, int64_t bytes) const = 0;
};

// The plain heap arena: Contains() is always false. One per process.
std::shared_ptr<HostArena> HeapArena();

// A move-only block of 16-bit host rows (F16/BF16) from an arena; keeps
// the arena alive until the block is freed.
class HostRows {
 public:
  HostRows() = default;
  // `elems` elements from `arena` (null: the heap arena).
  HostRows(std::shared_ptr<HostArena> arena, int64_t elems);
  ~HostRows() { Reset(); }
  HostRows(HostRows&& o) noexcept { *this = std::move(o); }
  HostRows& operator=(HostRows&& o) noexcept;
  HostRows(const HostRows&) = delete;
  HostRows& operator=(const HostRows&) = delete;

  uint16_t* data() { return data_; }
  const uint16_t* data() const { return data_; }
  int64_t size() const { return elems_; }
  const HostArena* arena() const { return arena_.get(); }

 private:
  void Reset();

  std::shared_ptr<HostArena> arena_;
  uint16_t* data_ = nullptr;
  int64_t elems_ = 0;
};

}  // namespace ckv
