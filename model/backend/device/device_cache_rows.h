// Store rows in device memory (model/kv/cache_rows.h), the device
// backend's StoreEnv::cache_rows. A clustered store keeps here its block
// caches' resident blocks (cache_mode copy: a block selected again within
// cache_steps steps is read on the device, only a miss crosses the link)
// and the mirrors of its sinks and open tail (model/kv/row_buffer.h: only
// rows appended since the last step cross). Rows from pinned segments go
// up by one H2D copy per run; other host rows (sinks, tail, heap segments)
// are packed into a pinned staging buffer and written to their places by
// one scatter op per Flush. Growth and compaction are device-to-device.
//
// All of it goes on the backend's compute stream, ahead of the attention
// that reads the rows (the backend calls Flush before it), so stream order
// is the only ordering needed; staged writes are flushed before any other
// copy touches rows, so they land in the order they were made. The
// bookkeeping stays on the host (BlockCache, RowBuffer); the device
// residency ops of kernels/device/phases.h are its device form.
//
// The first runtime error is kept (status(), which the backend reports);
// later copies into the failed rows are skipped.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "model/backend/backend.h"
#include "model/backend/device/grow_buffer.h"
#include "model/backend/device/pinned_arena.h"
#include "model/kv/cache_rows.h"

namespace ckv {

// Which segments' rows the arena keeps resident (NewResidentRows):
// kOffload none, kDevice every one asked for, kAuto while their bytes stay
// within budget_bytes. Under pressure (kAuto, a segment layer that does not
// fit) the rows no step has read for idle_steps steps — the least recently
// active sessions' — are evicted, oldest first, when that makes room; rows
// a recent step read are never evicted, so sessions decoding together do
// not evict each other every step (the newcomer stays on the host and goes
// through the block cache).
struct ResidencyOptions {
  KvResidency mode = KvResidency::kAuto;
  int64_t budget_bytes = 0;
  int64_t idle_steps = 2;
  // Rows not resident that one attention must copy (a question over a long
  // offloaded document) cross in chunks of at most this many bytes through
  // two landing buffers (DeviceBackend's streamed attention; capped at a
  // sixteenth of the device, at least 1 MiB).
  int64_t stream_chunk_bytes = BackendOptions{}.kv_stream_chunk_bytes;
};

// Bytes moved for the store rows (K and V, summed over every CacheRows),
// and the resident segments'.
struct CacheRowsStats {
  int64_t fill_bytes = 0;         // H2D: misses
  int64_t mirror_bytes = 0;       // D2D: misses read from resident segments
  int64_t staged_bytes = 0;       // of fill_bytes, through the staging buffer
  int64_t scatters = 0;           // scatter ops that wrote the staged rows
  int64_t move_bytes = 0;         // D2D: growth and compaction
  int64_t resident_bytes = 0;     // segment rows resident now
  int64_t resident_refusals = 0;  // segment layers kept on the host (budget)
  int64_t resident_evictions = 0;  // segment layers evicted for room
  int64_t evicted_bytes = 0;       // their bytes
  int64_t rows_freed = 0;  // device rows freed (stream-ordered, no wait)
};

class DeviceCacheRows;

class DeviceCacheArena final
    : public CacheRowsFactory,
      public std::enable_shared_from_this<DeviceCacheArena> {
 public:
  // Copies on `stream` of `runtime` (kept alive by keep_alive when owned);
  // segment rows that `pinned` contains are copied without staging.
  DeviceCacheArena(kernels::device::Runtime& runtime,
                   std::shared_ptr<void> keep_alive,
                   kernels::device::Stream stream,
                   std::shared_ptr<PinnedArena> pinned,
                   ResidencyOptions residency = {});
  ~DeviceCacheArena() override;

  std::unique_ptr<CacheRows> NewRows(int head_dim) override;
  std::unique_ptr<CacheRows> NewResidentRows(int head_dim, int64_t rows,
                                             bool asked_before) override;
  // A new step of the backend: rows used from now on are used by it
  // (ResidencyOptions::idle_steps counts these).
  void BeginStep();

  // When p (a span's K or V base) lies in the rows of a live CacheRows of
  // this arena: the device range from p to the end of those rows.
  bool Find(const void* p, kernels::device::Range* rows) const;
  // Enqueues the scatter of the staged writes (before work that reads
  // their rows).
  void Flush();
  absl::Status status() const;
  CacheRowsStats stats() const;

 private:
  friend class DeviceCacheRows;
  using DevPtr = kernels::device::DevPtr;

  // Records the first error; true when `s` is OK. Callers hold mu_.
  bool OkLocked(const absl::Status& s);
  void RegisterLocked(DevPtr k, DevPtr v, int64_t bytes);
  void UnregisterLocked(DevPtr k, DevPtr v);
  // Copies `bytes` of host memory at src to dst: from the device copy when
  // a resident segment mirrors them (D2D), else pinned rows directly, else
  // through the staging buffer.
  bool UploadLocked(DevPtr dst, const void* src, int64_t bytes);
  // Frees rows of a CacheRows (FreeAsync on the arena's stream).
  void FreeRowsLocked(DevPtr base);
  // The device copy of [src, src + bytes) when resident rows mirror it.
  bool FindMirrorLocked(const void* src, int64_t bytes, DevPtr* dev) const;
  bool FlushLocked();
  // Evicts idle resident rows, oldest first, until `bytes` more fit in the
  // budget; false (nothing evicted) when even all idle rows would not do.
  bool MakeRoomLocked(int64_t bytes);

  // A pending write of the next flush: `bytes` at src (the staging's
  // mapped view, a pinned segment's mapped rows, or a resident segment's
  // device rows) go to dst.
  struct Pending {
    DevPtr dst;
    DevPtr src;
    int64_t bytes = 0;
  };
  // Room in the staging for `row_bytes` of staged rows and the item table
  // of one more pending write (flushes, waits and grows when full).
  bool ReserveLocked(int64_t row_bytes);

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  kernels::device::Stream stream_;
  std::shared_ptr<PinnedArena> pinned_;
  ResidencyOptions residency_;
  mutable std::mutex mu_;
  absl::Status status_;
  std::map<uint64_t, int64_t> regions_;  // K or V rows: address -> bytes
  // Host rows of resident segments (K or V of a layer) -> their device copy.
  struct Mirror {
    DevPtr dev;
    int64_t bytes = 0;
  };
  std::map<uintptr_t, Mirror> mirrors_;
  PinnedBuffer staging_;
  DevPtr staging_dev_;        // its mapped device view
  int64_t staging_used_ = 0;  // bytes written since the last reuse
  std::vector<Pending> pending_;
  CacheRowsStats stats_;
  int64_t tick_ = 0;  // BeginStep calls
  // Resident rows by the step that last used them (least recent first).
  std::set<std::pair<int64_t, DeviceCacheRows*>> lru_;
};

}  // namespace ckv
