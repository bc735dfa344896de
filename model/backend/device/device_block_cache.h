// One (store, layer, KV head)'s block cache for copy mode kept on the
// device: the residency table and page arena that the cache_lists op works
// on (kernels/device/cache_threads.h), its blocks numbered per segment
// (clusters, then the segment's pages), sized so that the op never
// overflows — R + 1 steps of StepPagesBound pages (docs/device-backend.md,
// "Not yet here": after a step's evictions the cache holds the blocks of
// its last R steps). Made by the DevicePlanner (NewBlockCache) for a
// copy-mode store, which hands it back with each queued layer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device/cache_threads.h"
#include "kernels/device/runtime.h"
#include "model/backend/device/grow_buffer.h"
#include "model/kv/kv_config.h"
#include "model/kv/segment.h"
#include "model/kv/store_env.h"

namespace ckv {

// The most arena pages one step's requests can take: nq clusterkv plans
// (nq: the group's query heads, or 1 per KV head) over `segments`' index of
// (layer, kv_head). Per plan: the recent pages (at most
// recent / page_size + 2 per segment holding recent rows, ceil(page_size /
// 16) pages each) and the clusters taken after them — at most k + 1, k
// the most clusters whose rows before the recent range (smallest first)
// stay under the budget left, whose whole sizes sum to at most that
// budget + the largest cluster + the recent rows — each rounding up by a
// page at most. A quest store's plan: min(pages, ceil(budget / page_size))
// whole pages, ceil(page_size / 16) pages each.
int64_t StepPagesBound(const std::vector<const Segment*>& segments, int layer,
                       int kv_head, const KvStoreConfig& config, int nq);

class DevicePagedCache final : public DeviceBlockCache {
 public:
  // Its work goes on `stream` of `runtime` (which outlives it). on_move
  // (optional) hears of every table allocation it makes or frees:
  // (old base or 0, new base or 0, new bytes).
  using OnMove = std::function<void(uint64_t, uint64_t, int64_t)>;
  DevicePagedCache(kernels::device::Runtime& runtime,
                   kernels::device::Stream stream, int head_dim,
                   int cache_steps, OnMove on_move = nullptr);
  ~DevicePagedCache() override;
  DevicePagedCache(const DevicePagedCache&) = delete;
  DevicePagedCache& operator=(const DevicePagedCache&) = delete;

  // Before a step's cache_lists over `segments` of (layer, kv_head) for
  // nq plans of `config` (the same every call: one store's): numbers their
  // blocks and makes sure the table covers them with (R + 1) x
  // StepPagesBound pages, both computed again only when the segments
  // changed. A table that cannot (the segments do not extend the ones it
  // numbered, or it is too small) is made anew, empty, with room for twice
  // the blocks and the pages it needs (its blocks are fetched again: link
  // bytes, not answers). False after a runtime error (status()).
  bool Prepare(const std::vector<const Segment*>& segments, int layer,
               int kv_head, const KvStoreConfig& config, int nq);
  // seg_block()[s], s <= n_segs: segment s's first block (its blocks end
  // where segment s + 1's begin).
  const std::vector<int32_t>& seg_block() const { return seg_block_; }
  // The item's table and arena fields (slot .. page_pos, n_blocks,
  // n_pages, head_dim, cache_steps, bytes_per_token); the rest (plans,
  // segments, step, requests) is the caller's.
  void FillItem(kernels::device::threads::CacheItem* item) const;
  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_pages() const { return n_pages_; }
  // Tables made so far (the first one included).
  int64_t tables_made() const { return made_; }
  absl::Status status() const { return status_; }

 private:
  // A new empty table of n_blocks blocks and n_pages pages (the old one
  // freed on the stream).
  bool Make(int32_t n_blocks, int32_t n_pages);

  kernels::device::Runtime& rt_;
  kernels::device::Stream stream_;
  int head_dim_;
  int cache_steps_;
  OnMove on_move_;
  DeviceBuffer table_;  // the arrays, then the arena, from one allocation
  PinnedBuffer staging_;
  int32_t n_blocks_ = 0, n_pages_ = 0;
  std::vector<int64_t> uids_;  // the segments numbered, in order
  std::vector<int32_t> seg_block_ = {0};
  int64_t made_ = 0;
  absl::Status status_;
};

}  // namespace ckv
