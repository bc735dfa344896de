// FakeRuntime's memory: a device arena behind addresses the host cannot
// dereference, and the registry of mapped-pinned host buffers.
//
// Device addresses lie in a PROT_NONE reservation (a host dereference
// faults at once); the bytes live in a second, private read-write mapping
// of the same size that only the fake's op bodies see (HostView). Fresh
// allocations (device and pinned) are poisoned with 0xFF bytes (NaN as F32,
// F16 and BF16); freed ranges stay quarantined -- never handed out again
// and reported as use-after-free -- until `quarantine_bytes` of later frees
// push them out. Not thread-safe: FakeRuntime holds its lock around calls.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device/runtime.h"

namespace ckv::kernels::device {

inline constexpr uint8_t kPoisonByte = 0xFF;

class FakeMemory {
 public:
  FakeMemory(int64_t device_bytes, int64_t quarantine_bytes);
  ~FakeMemory();
  FakeMemory(const FakeMemory&) = delete;
  FakeMemory& operator=(const FakeMemory&) = delete;

  absl::Status init_status() const { return init_status_; }
  int64_t total_bytes() const { return device_bytes_; }
  int64_t free_bytes() const { return device_bytes_ - used_bytes_; }

  // async: a MallocAsync block, which only an async Free may free.
  absl::StatusOr<DevPtr> Malloc(int64_t bytes, Site site, bool async = false);
  absl::Status Free(DevPtr p, Site site, bool async = false);
  // FreeAsync's checks when it is enqueued: p starts a live MallocAsync
  // block not already being freed.
  absl::Status CheckAsyncFree(DevPtr p, Site site) const;
  // From now on CheckRange refuses the block (use after free) while it
  // stays mapped for the work enqueued before the free (no-op when p is
  // no longer live).
  void MarkFreeing(DevPtr p, Site site);
  absl::StatusOr<void*> HostAllocPinned(int64_t bytes, Site site);
  absl::Status HostFree(void* p, Site site);

  // True when [addr, addr + bytes) lies inside the device reservation (live
  // or not): a host pointer with such a value is a device address.
  bool InDeviceSpace(uint64_t addr) const;
  // True when the range lies inside one live pinned buffer.
  bool IsPinned(uint64_t addr, int64_t bytes) const;
  // OK when the range lies inside one live device allocation or one live
  // pinned buffer; else the error (use after free, out of bounds, unknown
  // address) naming the sites involved. `what` names the access.
  absl::Status CheckRange(Range r, const std::string& what, Site site) const;
  // Host-usable pointer to the bytes at a checked address.
  void* HostView(DevPtr p) const;
  // Bytes of the live device allocation starting at p (0 if none).
  int64_t BlockBytes(DevPtr p) const;
  // Where the live allocation holding addr was made ("?" if none).
  std::string AllocationSite(uint64_t addr) const;

 private:
  struct Block {
    int64_t bytes = 0;
    Site site;
    Site freed_at;
    bool async = false;    // made by MallocAsync
    bool freeing = false;  // FreeAsync enqueued at freed_at
  };
  // The block of `blocks` that contains addr, or null.
  static const Block* Find(const std::map<uint64_t, Block>& blocks,
                           uint64_t addr, uint64_t* base);
  // The error of freeing p, not a live block: double free, or unknown.
  absl::Status NotLive(DevPtr p, const char* call, Site site) const;
  void ReleaseQuarantine();
  void AddFree(uint64_t offset, int64_t bytes);

  int64_t device_bytes_;
  int64_t quarantine_limit_;
  absl::Status init_status_;
  char* reserved_ = nullptr;          // PROT_NONE: the addresses handed out
  char* backing_ = nullptr;           // read-write: the bytes
  int64_t used_bytes_ = 0;            // live + quarantined
  std::map<uint64_t, int64_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, Block> live_;    // device address -> block
  std::map<uint64_t, Block> freed_;   // quarantined device blocks
  std::deque<uint64_t> quarantine_;   // freed_ keys, oldest first
  int64_t quarantined_bytes_ = 0;
  std::map<uint64_t, Block> pinned_;        // host address -> buffer
  std::map<uint64_t, Block> freed_pinned_;  // kept allocated, inaccessible
  std::deque<uint64_t> pinned_quarantine_;
};

}  // namespace ckv::kernels::device
