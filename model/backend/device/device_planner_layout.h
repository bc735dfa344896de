// Internal to the device planner (device_planner.cc and
// device_planner_lists.cc): where one call's requests lie in its buffers,
// its batch tables, and a launched call until its plans are read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/device/cache_phases.h"
#include "kernels/device/phases.h"
#include "kernels/device/selection_threads.h"
#include "model/backend/device/device_block_cache.h"
#include "model/backend/device/device_planner.h"

namespace ckv {
namespace planner_layout {

inline constexpr int64_t kAlign = 64;

inline int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes of `n` elements of T, aligned.
template <class T>
inline int64_t Section(int64_t n) {
  return AlignUp(n * static_cast<int64_t>(sizeof(T)));
}

// Within one planned query's row lists (a section of its head's): rows,
// positions, ranges, the dest scratch.
struct ListOffsets {
  int64_t rows = 0, positions = 0, ranges = 0, dest = 0, bytes = 0;
};
inline ListOffsets ListLayout(int64_t cap, int n_segs, int64_t max_out) {
  ListOffsets o;
  o.positions = Section<int32_t>(cap);
  o.ranges = o.positions + Section<int64_t>(cap);
  o.dest = o.ranges + Section<int64_t>(2 * int64_t{n_segs});
  o.bytes = o.dest + Section<int64_t>(std::max<int64_t>(max_out, 1));
  return o;
}

}  // namespace planner_layout

using planner_layout::AlignUp;
using planner_layout::ListLayout;
using planner_layout::ListOffsets;
using planner_layout::Section;

// Where everything of one request lies: the upload (queries, then per KV
// head the block table: segment starts and sizes, each block's first and
// last member in the table pool), the device work buffer (scores and a
// select_blocks scratch per planned query) and the results the host reads
// back (per planned query its PlanTotals followed by its blocks, in the
// call's results region).
struct DevicePlanner::Layout {
  struct Head {
    int64_t total = 0;  // clusters over all segments
    int64_t seg_first = 0, seg_size = 0, member_first = 0,
            member_last = 0;  // in_dev offsets
    int64_t scores = 0;       // work offset: float [nq][total]
    int64_t scratch = 0;      // work offset of query 0's scratch
    int64_t scratch_stride = 0;
    int64_t max_out = 0;
    int64_t results = 0;  // results offset of query 0's result
    int64_t stride = 0;   // bytes per query's result
    // Row lists (Layout::lists): the segments' first positions and
    // storage order (in_dev), query 0's lists (work) and their stride.
    int64_t seg_pos = 0, seg_sorted = 0, seg_row_of = 0;
    int64_t lists = 0, list_stride = 0;
    // Quest's row lists read no clusters: in_dev offset of a zero table
    // (int64 [n_segs + 1]) their items take as seg_first.
    int64_t list_seg_first = 0;
    // Copy mode on the device: the cache's segment blocks (int32
    // [n_segs + 1]) and segment rows (uint64 [n_segs] each) in in_dev, its
    // requests (work) and its counters as read back (results).
    int64_t cache_seg_block = 0, cache_seg_keys = 0, cache_seg_values = 0;
    int64_t cache_requests = 0, cache_counters = 0;
  };
  // nq: plans per KV head (1 with per_kv_head); qn: queries uploaded per
  // KV head (nq, but quest's per_kv_head sums the group's page scores,
  // not its queries: group).
  int n_kv = 0, group = 0, nq = 0, qn = 0, hd = 0, n_segs = 0;
  bool shared = false;
  // Quest (threads::kSelectTopPages over page blocks, the segments' page
  // bounds scored), else clusterkv.
  bool quest = false;
  bool lists = false;  // the request's row lists are built
  bool cache = false;  // ... over its block caches (copy mode)
  std::vector<DevicePagedCache*> caches;  // per KV head
  int64_t cap = 0;     // entries of each query's lists
  int64_t q = 0;       // in_dev offset: float [n_kv][qn][hd]
  std::vector<Head> heads;
  int64_t in_bytes = 0, work_bytes = 0, out_bytes = 0;
  // Where this request's sections start in the call's buffers (the
  // offsets above are from these; out_off into the results region).
  int64_t in_off = 0, work_off = 0, out_off = 0;
  std::vector<const SegmentTables::Entry*> entries;  // per segment
};

// The call's batch tables (after every request's upload): the score items
// with their thread prefix and the select items; and the results region
// in the work buffer (every request's results, one D2H).
struct DevicePlanner::Batch {
  std::vector<kernels::device::threads::RowListItem> row_items;
  int64_t row_items_off = 0, max_slots = 0;
  // cache_lists: one item per (copy-mode request, KV head).
  std::vector<kernels::device::CacheItem> cache_items;
  std::vector<kernels::device::CacheHostItem> cache_host;
  int64_t cache_items_off = 0, max_requests = 0, max_cache_slots = 0;
  std::vector<int64_t> cache_counters_at;  // work offsets, per item
  std::vector<kernels::device::ScoreItem> score_items;
  std::vector<int64_t> thread_base = {0};
  std::vector<kernels::device::threads::SelectItem> select_items;
  std::vector<kernels::device::QueryItem>
      query_items;  // queries read on the device
  int dim = 0;      // every request's head_dim
  int64_t max_n = 0;
  int64_t score_items_off = 0, thread_base_off = 0, select_items_off = 0,
          query_items_off = 0;
  int64_t results = 0;  // work offset
};

// A launched call: its requests and layouts until FinishCall reads the
// plans (out: the results' bytes).
struct DevicePlanner::Call {
  std::vector<Request> requests;
  std::vector<Layout> layouts;
  std::vector<bool> planned;
  int64_t out = 0;
  bool launched = false;
  bool lists = false;  // it built row lists
  // Its buffers (regions of the step's chunks).
  char* in_host = nullptr;   // the upload
  char* out_host = nullptr;  // the plans read back
  DevPtr in_dev, work_dev;
};

}  // namespace ckv
