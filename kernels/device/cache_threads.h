// The per-thread bodies of cache_lists (kernels/device/cache_phases.h): the
// block cache of copy mode ("only what a step needs is copied") kept on the
// device. For one (session, layer, KV head) — an item — the group's device
// plans are resolved against the cache's residency table, the blocks that
// miss are copied from the segments' stored rows into pages of the cache's
// arena, and each planned query's row list names its rows in that arena,
// in plan order (the host store's copy-mode GatherRows order). Semantics
// and counters are BlockCache's (model/kv/block_cache.h): a block is looked
// up once per step however many requests name it, a miss brings the whole
// block, and blocks not used in the last cache_steps steps leave at the
// step's end. Written once for the fake's phases and the CUDA kernels
// (kernels/cuda/cache_ops.cu); plain C++ over raw pointers.
#pragma once

#include <cstdint>

#include "kernels/device/selection_threads.h"

namespace ckv::kernels::device::threads {

inline constexpr int kCachePageRows = 16;  // rows of one arena page

// An item's counters (CacheStats' fields, and what the op keeps for
// itself and the host: requests made, pages free, whether anything could
// not be served).
struct CacheCounters {
  int64_t lookups = 0, hits = 0, misses = 0;
  int64_t hit_tokens = 0, miss_tokens = 0, h2d_bytes = 0;
  int64_t resident_tokens = 0;
  int32_t free_top = 0;    // pages on the free stack
  int32_t n_requests = 0;  // requests of the last step
  // 1 when a request could not be served (too few free pages, a block
  // outside the table, more requests than max_requests): the host fails
  // the step (its lists name rows that were not written).
  int32_t overflow = 0;
  int32_t pad = 0;
};
static_assert(sizeof(CacheCounters) == 72);

// One listed plan block, as the cache sees it: the dense block index of
// the table (segment base + cluster, then the segment's pages), its size
// (the whole block) and what it is within its segment.
struct CacheRequest {
  int32_t block = 0;
  int32_t size = 0;
  int32_t segment = 0;
  int32_t kind = 0;
  int32_t id = 0;
  int32_t fetch = 0;  // 1: this request copies the block this step
};
static_assert(sizeof(CacheRequest) == 24);

// One item (device addresses). The plans and their lists are the group's
// RowListItems (per query head, or one per KV head): their block table,
// plans, and rows/positions/ranges/dest, which this op writes instead of
// row_lists (ranges[0] = {0, n}: one span over the arena).
struct CacheItem {
  uint64_t lists = 0;       // RowListItem [n_plans]
  uint64_t seg_size = 0;    // int64 [n_segs]
  uint64_t seg_block = 0;   // int32 [n_segs + 1]: a segment's first block
  uint64_t seg_keys = 0;    // uint64 [n_segs]: its stored K rows (16-bit)
  uint64_t seg_values = 0;  // uint64 [n_segs]
  // int64 [n] or 0: a cluster block b ends at member_last[b], else at
  // member_first[b + 1] (select_blocks' SelectArgs::member_last).
  uint64_t member_last = 0;
  // The residency table: slot (first page or -1), last_used and size per
  // block; next_page and free_stack per page; the counters.
  uint64_t slot = 0, last_used = 0, size = 0;
  uint64_t next_page = 0, free_stack = 0, counters = 0;
  uint64_t keys = 0, values = 0;  // uint16 [n_pages * kCachePageRows][hd]
  uint64_t page_pos = 0;          // int64 [n_pages * kCachePageRows]
  uint64_t requests = 0;          // CacheRequest [max_requests]
  int64_t max_requests = 0;
  int64_t step = 0;
  int32_t n_plans = 0, n_segs = 0, n_blocks = 0, n_pages = 0;
  int32_t head_dim = 0, cache_steps = 0;
  int32_t bytes_per_token = 0;  // K and V of one row (h2d_bytes)
  int32_t pad = 0;
};
static_assert(sizeof(CacheItem) == 176);

struct CacheView {
  const int64_t* seg_size = nullptr;
  const int32_t* seg_block = nullptr;
  const uint16_t* const* seg_keys = nullptr;
  const uint16_t* const* seg_values = nullptr;
  const int64_t* member_last = nullptr;
  int32_t* slot = nullptr;
  int64_t* last_used = nullptr;
  int32_t* size = nullptr;
  int32_t* next_page = nullptr;
  int32_t* free_stack = nullptr;
  CacheCounters* counters = nullptr;
  uint16_t* keys = nullptr;
  uint16_t* values = nullptr;
  int64_t* page_pos = nullptr;
  CacheRequest* requests = nullptr;
  int64_t max_requests = 0, step = 0;
  int32_t n_plans = 0, n_segs = 0, n_blocks = 0, n_pages = 0;
  int32_t head_dim = 0, cache_steps = 0, bytes_per_token = 0;
};

// The view's sizes and step, from the item (its pointers are mapped by
// the caller: the fake through its context, CUDA as they are).
CKV_HD void CopyScalars(const CacheItem& c, CacheView* v) {
  v->max_requests = c.max_requests;
  v->step = c.step;
  v->n_plans = c.n_plans;
  v->n_segs = c.n_segs;
  v->n_blocks = c.n_blocks;
  v->n_pages = c.n_pages;
  v->head_dim = c.head_dim;
  v->cache_steps = c.cache_steps;
  v->bytes_per_token = c.bytes_per_token;
}

// Block o of a plan (listed) as a request; block -1 when it lies outside
// the table.
CKV_HD CacheRequest RequestOf(const CacheView& c, const RowListView& v,
                              const PlannedBlock& o) {
  CacheRequest q;
  q.segment = o.segment;
  q.kind = o.kind;
  q.id = o.id;
  const int64_t s = o.segment;
  int64_t block = 0, size = 0;
  if (s >= c.n_segs) {
    block = -1;
  } else if (o.kind == kPlannedCluster) {
    const int64_t c0 = v.seg_first[s];
    const int64_t b = c0 + o.id;
    block = c.seg_block[s] + o.id;
    size =
        (c.member_last != nullptr ? c.member_last[b] : v.member_first[b + 1]) -
        v.member_first[b];
  } else {
    const int64_t clusters = v.seg_first[s + 1] - v.seg_first[s];
    block = c.seg_block[s] + clusters + o.id;
    const int64_t left = c.seg_size[s] - int64_t{o.id} * v.page_size;
    size = left < v.page_size ? left : v.page_size;
  }
  const bool fits = block >= c.seg_block[s] && block < c.seg_block[s + 1] &&
                    block < c.n_blocks && size > 0;
  q.block = fits ? static_cast<int32_t>(block) : -1;
  q.size = static_cast<int32_t>(size);
  return q;
}

// The arena row of row r of the block whose pages start at `first`.
CKV_HD int64_t PageRow(const CacheView& c, int32_t first, int64_t r) {
  int32_t page = first;
  for (int64_t i = 0; i < r / kCachePageRows && page >= 0; ++i) {
    page = c.next_page[page];
  }
  return page < 0 ? -1 : int64_t{page} * kCachePageRows + r % kCachePageRows;
}

// Phase 1 (a thread per item): the plans' listed blocks as requests in
// plan order (plan 0's blocks, then plan 1's, ...), each block's first
// list entry (dest) and each list's range {0, n}. plan(p) -> RowListView.
template <class Plans>
CKV_HD void CacheRequests(const CacheView& c, Plans&& plan) {
  CacheCounters& k = *c.counters;
  int64_t n = 0;
  for (int32_t p = 0; p < c.n_plans; ++p) {
    const RowListView v = plan(p);
    const int64_t blocks = v.totals->blocks < 0 ? 0 : v.totals->blocks;
    int64_t entries = 0;
    for (int64_t b = 0; b < v.max_out; ++b) {
      v.dest[b] = -1;
      if (b >= blocks || !ListedBlock(v, v.out[b])) continue;
      const CacheRequest q = RequestOf(c, v, v.out[b]);
      if (q.block < 0 || n >= c.max_requests) {
        k.overflow = 1;
        continue;
      }
      c.requests[n++] = q;
      v.dest[b] = entries;
      entries += v.out[b].count;
    }
    for (int32_t s = 0; s < v.n_segs; ++s) {
      v.ranges[2 * s] = 0;
      v.ranges[2 * s + 1] = 0;
    }
    v.ranges[1] = entries < v.cap ? entries : v.cap;
  }
  k.n_requests = static_cast<int32_t>(n);
}

// Phase 2 (a thread per item): BlockCache::Ensure over the requests in
// order — a block's first request this step counts a hit or a miss; a miss
// takes pages off the free stack (linked in list order) and is fetched.
CKV_HD void CacheResolve(const CacheView& c) {
  CacheCounters& k = *c.counters;
  for (int32_t r = 0; r < k.n_requests; ++r) {
    CacheRequest& q = c.requests[r];
    const int32_t b = q.block;
    q.fetch = 0;
    if (c.slot[b] >= 0) {
      if (c.last_used[b] == c.step) continue;  // looked up this step
      ++k.lookups;
      ++k.hits;
      k.hit_tokens += c.size[b];
      c.last_used[b] = c.step;
      continue;
    }
    if (c.last_used[b] == c.step) continue;  // missed this step, no room
    ++k.lookups;
    ++k.misses;
    k.miss_tokens += q.size;
    k.h2d_bytes += int64_t{c.bytes_per_token} * q.size;
    c.last_used[b] = c.step;
    const int32_t pages = (q.size + kCachePageRows - 1) / kCachePageRows;
    if (pages > k.free_top) {
      k.overflow = 1;
      continue;
    }
    int32_t first = -1;
    for (int32_t i = 0; i < pages; ++i) {  // pushed in reverse: list order
      const int32_t page = c.free_stack[--k.free_top];
      c.next_page[page] = first;
      first = page;
    }
    c.slot[b] = first;
    c.size[b] = q.size;
    k.resident_tokens += q.size;
    q.fetch = 1;
  }
}

// Phase 3 (a thread per request slot r): a fetching request copies its
// whole block — K, V and position of each row — from the segment's stored
// rows into its pages. `table` is any of the item's plans (they share the
// block table).
CKV_HD void CacheFetch(const CacheView& c, const RowListView& table,
                       int64_t r) {
  if (r >= c.counters->n_requests || c.requests[r].fetch == 0) return;
  const CacheRequest& q = c.requests[r];
  const int32_t first = c.slot[q.block];
  const int64_t hd = c.head_dim;
  for (int64_t i = 0; i < q.size; ++i) {
    int64_t seg_row = 0, stored = 0;
    BlockRow(table, q.segment, q.kind, q.id, i, &seg_row, &stored);
    const int64_t row = PageRow(c, first, i);
    if (row < 0) return;
    const uint16_t* k = c.seg_keys[q.segment] + stored * hd;
    const uint16_t* v = c.seg_values[q.segment] + stored * hd;
    for (int64_t d = 0; d < hd; ++d) {
      c.keys[row * hd + d] = k[d];
      c.values[row * hd + d] = v[d];
    }
    c.page_pos[row] = table.seg_pos[q.segment] + seg_row;
  }
}

// Phase 4 (a thread per plan slot b of plan `v`): block b's entries, the
// arena rows of its rows [begin, begin + count) and their positions. A
// block without pages (an overflow) lists row 0.
CKV_HD void CacheFill(const CacheView& c, const RowListView& v, int64_t b) {
  const int64_t blocks = v.totals->blocks < 0 ? 0 : v.totals->blocks;
  if (b >= blocks || v.dest[b] < 0) return;
  const PlannedBlock& o = v.out[b];
  const CacheRequest q = RequestOf(c, v, o);
  const int32_t first = q.block < 0 ? -1 : c.slot[q.block];
  for (int64_t i = 0; i < o.count && v.dest[b] + i < v.cap; ++i) {
    const int64_t row = first < 0 ? -1 : PageRow(c, first, o.begin + i);
    v.rows[v.dest[b] + i] = static_cast<int32_t>(row < 0 ? 0 : row);
    v.positions[v.dest[b] + i] = row < 0 ? 0 : c.page_pos[row];
  }
}

// Phase 5 (a thread per item): BlockCache::EndStep — blocks with
// step - last_used >= cache_steps leave, their pages back on the free
// stack in block order.
CKV_HD void CacheEvict(const CacheView& c) {
  CacheCounters& k = *c.counters;
  for (int32_t b = 0; b < c.n_blocks; ++b) {
    if (c.slot[b] < 0 || c.step - c.last_used[b] < c.cache_steps) continue;
    for (int32_t p = c.slot[b]; p >= 0; p = c.next_page[p]) {
      c.free_stack[k.free_top++] = p;
    }
    k.resident_tokens -= c.size[b];
    c.slot[b] = -1;
  }
}

}  // namespace ckv::kernels::device::threads
