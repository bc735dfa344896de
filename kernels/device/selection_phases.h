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
// segment s is block seg_first[s] + c).
#pragma once

#include <cstdint>

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
  DevPtr scratch;       // SelectScratchBytes(n, n_segs)
  DevPtr out;           // PlannedBlock [max_out]
  int64_t max_out = 0;  // >= MaxPlannedBlocks(...)
  DevPtr totals;        // PlanTotals
};

// The op's scratch for n blocks over n_segs segments: order, avail (int32
// [n]), before, slot (int64 [n]), recent_begin (int64 [n_segs]), each
// 256-byte aligned; offsets from the scratch's start.
struct SelectScratch {
  int64_t order = 0, avail = 0, before = 0, slot = 0, recent_begin = 0;
  int64_t bytes = 0;
};
inline SelectScratch SelectScratchLayout(int64_t n, int32_t n_segs) {
  auto align = [](int64_t b) { return (b + 255) / 256 * 256; };
  SelectScratch l;
  l.avail = l.order + align(4 * n);
  l.before = l.avail + align(4 * n);
  l.slot = l.before + align(8 * n);
  l.recent_begin = l.slot + align(8 * n);
  l.bytes = l.recent_begin + align(8 * int64_t{n_segs});
  return l;
}
inline int64_t SelectScratchBytes(int64_t n, int32_t n_segs) {
  return SelectScratchLayout(n, n_segs).bytes;
}
// Enough output entries for any plan: every block plus the recent pages
// (recent_tokens / page_size + one partial page per segment).
int64_t MaxPlannedBlocks(int64_t n, int32_t n_segs, int64_t recent_tokens,
                         int32_t page_size);

// The op's pointers: every address of `a` (and its scratch layout) through
// map(DevPtr, bytes, write) -> void* (the fake's OpContext, or the device
// address itself on a GPU).
template <class Map>
threads::SelectView SelectViewOf(const SelectArgs& a, Map&& map) {
  threads::SelectView v;
  auto in = [&](DevPtr p, int64_t bytes) { return map(p, bytes, false); };
  auto out = [&](DevPtr p, int64_t bytes) { return map(p, bytes, true); };
  v.scores = static_cast<const float*>(in(a.scores, 4 * a.n));
  v.n = a.n;
  v.seg_first =
      static_cast<const int64_t*>(in(a.seg_first, 8 * (a.n_segs + 1)));
  v.seg_size = static_cast<const int64_t*>(in(a.seg_size, 8 * a.n_segs));
  v.n_segs = a.n_segs;
  v.member_first =
      static_cast<const int64_t*>(in(a.member_first, 8 * (a.n + 1)));
  v.member_last = a.member_last.null()
                      ? nullptr
                      : static_cast<const int64_t*>(in(a.member_last, 8 * a.n));
  v.members = static_cast<const int32_t*>(in(a.members, 4 * a.n_members));
  v.n_members = a.n_members;
  v.budget = a.budget;
  v.recent_tokens = a.recent_tokens;
  v.page_size = a.page_size;
  v.max_out = a.max_out;
  const SelectScratch l = SelectScratchLayout(a.n, a.n_segs);
  v.order = static_cast<int32_t*>(out(a.scratch + l.order, 4 * a.n));
  v.avail = static_cast<int32_t*>(out(a.scratch + l.avail, 4 * a.n));
  v.before = static_cast<int64_t*>(out(a.scratch + l.before, 8 * a.n));
  v.slot = static_cast<int64_t*>(out(a.scratch + l.slot, 8 * a.n));
  v.recent_begin = static_cast<int64_t*>(
      out(a.scratch + l.recent_begin, 8 * int64_t{a.n_segs}));
  v.out = static_cast<PlannedBlock*>(
      out(a.out, a.max_out * static_cast<int64_t>(sizeof(PlannedBlock))));
  v.totals = static_cast<PlanTotals*>(
      out(a.totals, static_cast<int64_t>(sizeof(PlanTotals))));
  return v;
}

// One op, five phases (kernels/device/selection_threads.h): the recent pages
// (one thread), the score order (a thread per block ranks it among all: the
// reference form of a sort), each block's rows before the recent range (a
// thread per block), the running token count in order (one thread: a scan), the
// cluster blocks written at their places (a thread per position). A plan that
// would overflow max_out writes totals.blocks = -1 and nothing past max_out.
Op SelectBlocksOp(const SelectArgs& a);

}  // namespace ckv::kernels::device
