// The device copies of segments' selection indexes, resident across steps:
// per (segment, sparse layer) every KV head's F16 centroid panels (the
// CPU's exact bits), cluster members (ascending segment rows per
// cluster), for rows stored by cluster row_of, and quest's F32 page bounds
// (page_min then page_max), in one device pool: an entry holds whatever
// index the segment's layer has (a segment's index is built once, before
// any plan reads it, so clusterkv and quest stores sharing a segment read
// one entry, each its own part of it). An
// entry is uploaded the first time a plan needs it and shared by every store
// holding the segment (forks share segments; a segment's uid is unique in the
// process, so an entry never names another segment). When the pool is full,
// entries not used by the current call are evicted least recently used first;
// then the pool grows (doubling, contents copied on the device) up to its
// limit. Cluster offsets stay on the host, which builds each call's small block
// table. Not thread-safe (the DevicePlanner's lock); every call must end with a
// synchronisation of `stream` before the next (the staging is reused).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "model/backend/device/grow_buffer.h"
#include "model/backend/device/range_allocator.h"
#include "model/kv/segment.h"

namespace ckv {

class SegmentTables {
 public:
  // Where one KV head's index lies in the pool (bytes from its start).
  struct Head {
    int64_t panels = 0;   // uint16 [centroid_panels.size()]
    int64_t members = 0;  // int32 [segment rows]; a multiple of 4
    // int32 [segment rows]: HeadIndex::row_of (rows stored by cluster),
    // or -1 (stored in position order).
    int64_t row_of = -1;
    // float [pages][head_dim]: HeadIndex::page_min, page_max right after
    // it (page_min + 4 * pages * head_dim); -1 without a page index.
    int64_t page_min = -1;
    int64_t pages = 0;
  };
  struct Entry {
    int64_t offset = 0, bytes = 0;
    int64_t last_used = 0;
    std::vector<Head> heads;
  };

  SegmentTables(kernels::device::Runtime& runtime,
                kernels::device::Stream stream, int64_t max_bytes);
  ~SegmentTables();

  // (seg, layer)'s entry, resident for the call numbered `tick` (entries of
  // the current tick are never evicted): null when the pool cannot hold it
  // at its limit (the caller plans another way) or on a runtime error
  // (Ok(status()) false). The entry's addresses hold until the next call.
  const Entry* Ensure(const Segment& seg, int layer, int64_t tick);

  kernels::device::DevPtr pool() const { return pool_; }
  int64_t pool_bytes() const { return ranges_.capacity(); }
  absl::Status status() const { return status_; }
  int64_t uploads() const { return uploads_; }
  int64_t evictions() const { return evictions_; }
  int64_t resident_bytes() const { return ranges_.used(); }
  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }

 private:
  using Key = std::pair<int64_t, int>;  // segment uid, layer
  bool Ok(const absl::Status& s);
  // A range of `bytes` for the current tick, evicting and growing as
  // needed; -1 when it cannot be had.
  int64_t Place(int64_t bytes, int64_t tick);
  bool EvictOne(int64_t tick);
  bool GrowPool(int64_t need);
  bool Upload(const Segment& seg, int layer, Entry& e);

  kernels::device::Runtime& rt_;
  kernels::device::Stream stream_;
  int64_t max_bytes_;
  kernels::device::DevPtr pool_;
  RangeAllocator ranges_;
  PinnedBuffer staging_;
  absl::node_hash_map<Key, Entry> entries_;  // pointer-stable values
  absl::Status status_;
  int64_t uploads_ = 0, evictions_ = 0;
};

}  // namespace ckv
