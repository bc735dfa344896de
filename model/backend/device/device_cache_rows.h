// Block-cache rows in device memory (model/kv/cache_rows.h), the device
// backend's StoreEnv::cache_rows: with cache_mode copy a store's cluster
// cache keeps its resident blocks here, so a block selected again within
// cache_steps steps is read on the device, and only a miss crosses the link
// (one H2D copy per run of the block's stored rows, straight from the
// segment when its rows are pinned, else through a staging buffer).
// Growth and compaction are device-to-device copies.
//
// All copies go on the backend's compute stream, ahead of the attention
// that reads the rows, so stream order is the only ordering needed. The
// bookkeeping stays on the host (BlockCache); the device residency ops of
// kernels/device/phases.h are its device form (docs/device-runtime.md).
//
// The first runtime error is kept (status(), which the backend reports);
// later copies into the failed rows are skipped.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "model/backend/device/grow_buffer.h"
#include "model/backend/device/pinned_arena.h"
#include "model/kv/cache_rows.h"

namespace ckv {

// Bytes moved for the block caches (K and V, summed over every cache).
struct CacheRowsStats {
  int64_t fill_bytes = 0;    // H2D: misses
  int64_t staged_bytes = 0;  // of fill_bytes, through the staging buffer
  int64_t move_bytes = 0;    // D2D: growth and compaction
};

class DeviceCacheArena final
    : public CacheRowsFactory,
      public std::enable_shared_from_this<DeviceCacheArena> {
 public:
  // Copies on `stream` of `runtime` (kept alive by keep_alive when owned);
  // segment rows that `pinned` contains are copied without staging.
  DeviceCacheArena(kernels::device::Runtime& runtime,
                   std::shared_ptr<void> keep_alive,
                   kernels::device::Stream stream,
                   std::shared_ptr<PinnedArena> pinned);
  ~DeviceCacheArena() override;

  std::unique_ptr<CacheRows> NewRows(int head_dim) override;

  // The K or V rows of a live CacheRows of this arena that start at `p`
  // (what a span over a cache holds): their device range.
  bool Find(const void* p, kernels::device::Range* rows) const;
  absl::Status status() const;
  CacheRowsStats stats() const;

 private:
  friend class DeviceCacheRows;
  using DevPtr = kernels::device::DevPtr;

  // Records the first error; true when `s` is OK. Callers hold mu_.
  bool OkLocked(const absl::Status& s);
  void RegisterLocked(DevPtr k, DevPtr v, int64_t bytes);
  void UnregisterLocked(DevPtr k, DevPtr v);
  // Copies `bytes` of host memory at src to dst (pinned: directly).
  bool UploadLocked(DevPtr dst, const void* src, int64_t bytes);

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  kernels::device::Stream stream_;
  std::shared_ptr<PinnedArena> pinned_;
  mutable std::mutex mu_;
  absl::Status status_;
  std::map<uint64_t, int64_t> regions_;  // K or V rows: address -> bytes
  PinnedBuffer staging_;
  int64_t staging_used_ = 0;
  CacheRowsStats stats_;
};

}  // namespace ckv
