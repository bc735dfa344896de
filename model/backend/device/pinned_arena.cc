#include "model/backend/device/pinned_arena.h"

#include <algorithm>
#include <iterator>
#include <new>
#include <utility>

namespace ckv {
namespace {

constexpr int64_t kBlockAlign = 256;
constexpr std::align_val_t kHeapAlign{64};

}  // namespace

PinnedArena::PinnedArena(kernels::device::Runtime& runtime,
                         std::shared_ptr<void> keep_alive,
                         const PinnedArenaOptions& options)
    : rt_(runtime), keep_alive_(std::move(keep_alive)), options_(options) {}

PinnedArena::~PinnedArena() {
  std::lock_guard<std::mutex> lock(mu_);
  // Every block is freed by now (blocks keep the arena alive).
  while (!slabs_.empty()) ReleaseLocked(static_cast<int>(slabs_.size()) - 1);
}

int64_t PinnedArena::RoundUp(int64_t bytes) {
  return (std::max<int64_t>(bytes, 1) + kBlockAlign - 1) / kBlockAlign *
         kBlockAlign;
}

void* PinnedArena::Allocate(int64_t bytes) {
  const int64_t need = RoundUp(bytes);
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool own = need > options_.slab_bytes / 2;
    if (!own) {
      for (Slab& s : slabs_) {
        if (s.own) continue;
        const int64_t off = s.ranges.Allocate(need);
        if (off >= 0) {
          p = s.base + off;
          break;
        }
      }
    }
    if (p == nullptr) {
      const int i = NewSlabLocked(own ? need : options_.slab_bytes, own);
      if (i >= 0) p = slabs_[i].base + slabs_[i].ranges.Allocate(need);
    }
    if (p == nullptr) ++heap_blocks_;
  }
  if (p == nullptr) {
    return ::operator new(static_cast<size_t>(bytes), kHeapAlign);
  }
  // A failure here is a race report of the ordering checker (the fake), not
  // a reason to refuse the block; it stays in the runtime's status.
  (void)rt_.HostWrite(p, bytes);
  return p;
}

void PinnedArena::Free(void* p, int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = FindLocked(p, bytes);
    if (i >= 0) {
      Slab& s = slabs_[i];
      s.ranges.Free(static_cast<char*>(p) - s.base, RoundUp(bytes));
      const bool keep_one =
          !s.own && std::count_if(slabs_.begin(), slabs_.end(),
                                  [](const Slab& x) { return !x.own; }) == 1;
      if (s.ranges.used() == 0 && !keep_one) ReleaseLocked(i);
      return;
    }
  }
  ::operator delete(p, kHeapAlign);
}

bool PinnedArena::Contains(const void* p, int64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return FindLocked(p, bytes) >= 0;
}

bool PinnedArena::Mapped(const void* p, int64_t bytes,
                         kernels::device::DevPtr* dev) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int slab = FindLocked(p, bytes);
  if (slab < 0) return false;
  const Slab& s = slabs_[slab];
  *dev = s.mapped + (static_cast<const char*>(p) - s.base);
  return true;
}

int64_t PinnedArena::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_;
}

int64_t PinnedArena::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t used = 0;
  for (const Slab& s : slabs_) used += s.ranges.used();
  return used;
}

int64_t PinnedArena::heap_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heap_blocks_;
}

int PinnedArena::FindLocked(const void* p, int64_t bytes) const {
  const char* c = static_cast<const char*>(p);
  auto it =
      std::upper_bound(slabs_.begin(), slabs_.end(), c,
                       [](const char* x, const Slab& s) { return x < s.base; });
  if (it == slabs_.begin()) return -1;
  --it;
  if (c + bytes > it->base + it->bytes) return -1;
  return static_cast<int>(it - slabs_.begin());
}

int PinnedArena::NewSlabLocked(int64_t bytes, bool own) {
  if (pinned_ + bytes > options_.limit_bytes) return -1;
  absl::StatusOr<void*> p = rt_.HostAllocPinned(bytes);
  if (!p.ok()) return -1;  // the caller falls back to the heap
  absl::StatusOr<kernels::device::DevPtr> mapped = rt_.MappedPointer(*p);
  if (!mapped.ok()) {
    rt_.HostFree(*p).IgnoreError();
    return -1;
  }
  Slab s;
  s.base = static_cast<char*>(*p);
  s.mapped = *mapped;
  s.bytes = bytes;
  s.own = own;
  s.ranges.Grow(bytes);
  pinned_ += bytes;
  auto at =
      std::upper_bound(slabs_.begin(), slabs_.end(), s.base,
                       [](const char* x, const Slab& y) { return x < y.base; });
  const int index = static_cast<int>(at - slabs_.begin());
  slabs_.insert(at, std::move(s));
  return index;
}

void PinnedArena::ReleaseLocked(int slab) {
  Slab& s = slabs_[slab];
  // An error here is the runtime's (sticky on a device); the slab is gone
  // from the arena either way.
  rt_.HostFree(s.base).IgnoreError();
  pinned_ -= s.bytes;
  slabs_.erase(slabs_.begin() + slab);
}

}  // namespace ckv
