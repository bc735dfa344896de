// clusterkv's selection of one query's plan on device layouts, written once
// as phase functions (phases.h, GPU.md "Per sparse layer": the SelectBlocks
// step). Semantics are the product policy's (model/kv/policies/clusterkv.cc,
// PlanFromScores, and AddRecentRows of model/kv/selection.cc), which the
// tests hold it to bit for bit:
//   - the `recent_tokens` most recent clustered rows (at most the budget)
//     first, as page blocks of page_size rows in position order, the last
//     segment first;
//   - then whole clusters by descending score (NaN ranks as -inf; ties,
//     ±0 and equal infinities included, by segment then cluster index),
//     each contributing its members before the recent range, the last one
//     trimmed, until min(budget, clustered rows) tokens are planned.
// The blocks of every segment are concatenated segment-major (cluster c of
// segment s is block seg_first[s] + c). With mode kSelectTopPages the same
// op plans quest (model/kv/policies/quest.cc): the blocks are pages, and
// the plan is the best min(pages, ceil(budget / page_size)) whole pages
// in score order (same NaN and tie order), no recent pages.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device/op_tables.h"
#include "kernels/device/runtime.h"
#include "kernels/device/selection_threads.h"

namespace ckv::kernels::device {

struct SelectArgs {
  DevPtr scores;  // float [n]: every block's score for the query
  int64_t n = 0;
  DevPtr seg_first;  // int64 [n_segs + 1]: first block of each segment
  DevPtr seg_size;   // int64 [n_segs]: rows of each segment
  int32_t n_segs = 0;
  // Block b's members (ascending rows of its segment) are
  // members[member_first[b] .. end), end = member_last[b] when member_last
  // is set (blocks anywhere in `members`, e.g. segments resident in a
  // device pool), else member_first[b + 1] (blocks back to back).
  DevPtr member_first;  // int64 [n + 1]
  DevPtr member_last;   // optional int64 [n]
  DevPtr members;       // int32 [n_members]
  int64_t n_members = 0;
  int64_t budget = 0;
  int64_t recent_tokens = 0;
  int32_t page_size = 16;
  // threads::SelectMode: kSelectTopPages plans quest's best pages (the
  // blocks are pages; member_first, member_last and members unread).
  int32_t mode = threads::kSelectFillBudget;
  DevPtr scratch;       // SelectScratchBytes(n, n_segs)
  DevPtr out;           // PlannedBlock [max_out]
  int64_t max_out = 0;  // >= MaxPlannedBlocks(...)
  DevPtr totals;        // PlanTotals
};

// The op's scratch (threads::SelectScratchLayout).
using threads::SelectScratch;
using threads::SelectScratchLayout;
inline int64_t SelectScratchBytes(int64_t n, int32_t n_segs) {
  return SelectScratchLayout(n, n_segs).bytes;
}
// Enough output entries for any plan: every block plus the recent pages
// (recent_tokens / page_size + one partial page per segment).
int64_t MaxPlannedBlocks(int64_t n, int32_t n_segs, int64_t recent_tokens,
                         int32_t page_size);

// `a` as the plain addresses a batch holds in device memory.
threads::SelectItem ItemOf(const SelectArgs& a);

// The op's pointers: every address of `a` (and its scratch layout) through
// map(DevPtr, bytes, write) -> void* (the fake's OpContext, or the device
// address itself on a GPU).
template <class Map>
threads::SelectView SelectViewOf(const SelectArgs& a, Map&& map) {
  return threads::ViewOf(ItemOf(a),
                         [&map](uint64_t addr, int64_t bytes, bool write) {
                           return map(DevPtr{addr}, bytes, write);
                         });
}

// One op, four phases (kernels/device/selection_threads.h): the recent pages
// (one thread), each block's rows before the recent range (a thread per
// block), each block taken or not and written at its place (a thread per
// block: it counts the rows of the blocks with rows before it in score
// order and stops once they fill the budget, so only taken blocks compare
// with all n), the totals (one thread). No sort: the order matters only
// up to the budget. A plan that would overflow max_out writes
// totals.blocks = -1 and nothing past max_out.
Op SelectBlocksOp(const SelectArgs& a);
// The same over a batch (every planned query of a planner call, one op):
// items (SelectItem [n_items] in device memory, built by ItemOf) are
// problems of their own (scratch and outputs each); host_items is the host
// copy the op's ranges are declared from (what `items` holds). Each phase
// runs the threads of every item (a thread per item, or per block of each).
struct SelectBatchArgs {
  DevPtr items;
  int32_t n_items = 0;
  int64_t max_n = 0;  // most blocks of one item (a device's grid)
};
Op SelectBlocksBatchOp(const SelectBatchArgs& a,
                       const std::vector<threads::SelectItem>& host_items);

// The row-list problem of the plan select problem `a` writes: its plan and
// block table, and where the lists go (threads::RowListItem's fields).
struct RowListTargets {
  DevPtr seg_pos, seg_sorted;  // int64 / int32 [a.n_segs]
  DevPtr seg_row_of;           // int64 [a.n_segs]: offsets into row_of
  DevPtr row_of;               // int32 [n_row_of]
  int64_t n_row_of = 0;
  DevPtr rows, positions;      // int32 / int64 [cap]
  DevPtr ranges;               // int64 [a.n_segs][2]
  DevPtr dest;                 // int64 [a.max_out]
  int64_t cap = 0;
};
threads::RowListItem RowListItemOf(const SelectArgs& a,
                                   const RowListTargets& t);

// The row lists of planned queries (threads::RowListItem, after their
// select_blocks items; items in device memory, their host copy declares
// the ranges): a thread per item lays out its ranges, then a thread per
// (item, plan slot) writes a block's rows and positions. max_slots: the
// largest max_out of an item (a device's grid).
struct RowListsBatchArgs {
  DevPtr items;
  int32_t n_items = 0;
  int64_t max_slots = 0;
};
Op RowListsBatchOp(const RowListsBatchArgs& a,
                   const std::vector<threads::RowListItem>& host_items);
// What one row-list item reads (its plan, block table, segment tables)
// and writes (its lists, ranges, dest), added to op's declared ranges
// (row_lists and cache_lists declare their items alike).
void DeclareRowListItem(const threads::RowListItem& it, Op* op);

}  // namespace ckv::kernels::device
