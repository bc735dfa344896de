// The device backend's HostArena (model/kv/host_arena.h): segment rows in
// mapped-pinned slabs of the runtime, so that the device copies them
// straight from the segments. Blocks are carved first-fit from slabs of
// `slab_bytes` (a block over half a slab gets a pinned allocation of its
// own); freed blocks coalesce and an empty slab is returned to the runtime
// (all but one). Past `limit_bytes` of pinned memory, or when the runtime
// refuses, blocks come from the heap (Contains() false: the device backend
// stages those rows). Every block handed out is announced to the runtime as
// a host write (HostWrite), so the ordering checker reports a block reused
// while a device copy of its previous contents may still be pending.
// Thread-safe. The runtime must outlive the arena: the arena keeps
// `keep_alive` (the runtime's owner, or null when the caller guarantees it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/device/runtime.h"
#include "model/backend/device/range_allocator.h"
#include "model/kv/host_arena.h"

namespace ckv {

struct PinnedArenaOptions {
  int64_t slab_bytes = int64_t{16} << 20;
  int64_t limit_bytes = int64_t{64} << 30;
};

class PinnedArena final : public HostArena {
 public:
  PinnedArena(kernels::device::Runtime& runtime,
              std::shared_ptr<void> keep_alive,
              const PinnedArenaOptions& options = {});
  ~PinnedArena() override;

  void* Allocate(int64_t bytes) override;
  void Free(void* p, int64_t bytes) override;
  bool Contains(const void* p, int64_t bytes) const override;
  // Contains(), and then the device address of p (the slab's mapped view,
  // asked of the runtime once per slab, not per call).
  bool Mapped(const void* p, int64_t bytes, kernels::device::DevPtr* dev) const;

  // Pinned bytes held from the runtime (slabs and own blocks), blocks in
  // use in them, and heap blocks handed out after the limit.
  int64_t pinned_bytes() const;
  int64_t used_bytes() const;
  int64_t heap_blocks() const;

 private:
  struct Slab {
    char* base = nullptr;
    kernels::device::DevPtr mapped;  // base's device view
    int64_t bytes = 0;
    bool own = false;  // one block's own allocation
    RangeAllocator ranges;
  };

  static int64_t RoundUp(int64_t bytes);
  // The slab holding [p, p + bytes), or -1. Caller holds mu_.
  int FindLocked(const void* p, int64_t bytes) const;
  // A new pinned slab of `bytes` (own: for one block), or -1.
  int NewSlabLocked(int64_t bytes, bool own);
  void ReleaseLocked(int slab);

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  PinnedArenaOptions options_;
  mutable std::mutex mu_;
  std::vector<Slab> slabs_;  // by base address
  int64_t pinned_ = 0;
  int64_t heap_blocks_ = 0;
};

}  // namespace ckv
