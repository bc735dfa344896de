// cache_lists: copy mode's block cache kept on the device (GPU.md "Per
// sparse layer": ResolveResidency -> FetchMisses -> row lists, one op).
// Bodies: kernels/device/cache_threads.h, which states the semantics
// (model/kv/block_cache.h's, counter for counter). The fake runs the
// phases below; CUDA runs the same bodies as kernels
// (OpLaunchers::CacheListsBatch).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device/cache_threads.h"
#include "kernels/device/runtime.h"

namespace ckv::kernels::device {

using threads::CacheCounters;
using threads::CacheItem;
using threads::CacheRequest;
using threads::kCachePageRows;

// One item as the host built it: the item (what `items` holds in device
// memory), its plans' RowListItems (what item.lists holds) and each
// segment's K and V rows with their sizes in bytes (what seg_keys and
// seg_values hold), from which the op declares its ranges.
struct CacheHostItem {
  CacheItem item;
  std::vector<threads::RowListItem> lists;
  std::vector<Range> seg_keys, seg_values;
};

// Over a batch of items (CacheItem [n_items] in device memory): requests
// (a thread per item), residency (a thread per item), fetches (a thread
// per (item, request slot)), list entries (a thread per (item, plan slot)),
// evictions (a thread per item). max_requests / max_slots: the largest of
// an item (its max_requests; n_plans x max_out of its plans).
struct CacheListsArgs {
  DevPtr items;
  int32_t n_items = 0;
  int64_t max_requests = 0;
  int64_t max_slots = 0;
};
Op CacheListsBatchOp(const CacheListsArgs& a,
                     const std::vector<CacheHostItem>& host_items);

// Bytes of an item's table and arena, and the host image of an empty table
// (no block resident, every page free) to copy to `item`'s addresses:
// int32 slot[n_blocks] = -1, int64 last_used = -1, int32 size = 0,
// int32 next_page[n_pages] = -1, int32 free_stack = 0 .. n_pages - 1,
// counters with free_top = n_pages.
struct CacheTableImage {
  std::vector<int32_t> slot, size, next_page, free_stack;
  std::vector<int64_t> last_used;
  CacheCounters counters;
};
CacheTableImage EmptyCacheTable(int32_t n_blocks, int32_t n_pages);

}  // namespace ckv::kernels::device
