#include "kernels/device/selection_phases.h"

#include <algorithm>

namespace ckv::kernels::device {
namespace {

template <class T>
Range Of(DevPtr p, int64_t count) {
  return Range{p, count * static_cast<int64_t>(sizeof(T))};
}

}  // namespace

int64_t MaxPlannedBlocks(int64_t n, int32_t n_segs, int64_t recent_tokens,
                         int32_t page_size) {
  return n + recent_tokens / std::max(1, page_size) + 2 * int64_t{n_segs};
}

Op SelectBlocksOp(const SelectArgs& a) {
  Op op;
  op.name = "select_blocks";
  op.reads = {Of<float>(a.scores, a.n), Of<int64_t>(a.seg_first, a.n_segs + 1),
              Of<int64_t>(a.seg_size, a.n_segs),
              Of<int64_t>(a.member_first, a.n + 1),
              Of<int32_t>(a.members, a.n_members)};
  if (!a.member_last.null()) {
    op.reads.push_back(Of<int64_t>(a.member_last, a.n));
  }
  op.writes = {Range{a.scratch, SelectScratchBytes(a.n, a.n_segs)},
               Of<PlannedBlock>(a.out, a.max_out), Of<PlanTotals>(a.totals, 1)};
  op.body = [a](OpContext& ctx) {
    const threads::SelectView v =
        SelectViewOf(a, [&ctx](DevPtr p, int64_t bytes, bool write) {
          return write ? static_cast<void*>(ctx.Out<char>(p, bytes))
                       : const_cast<char*>(ctx.In<char>(p, bytes));
        });
    ctx.Phase(1, [&](int64_t) { threads::SelectRecent(v); });
    ctx.Phase(a.n, [&](int64_t b) { threads::SelectRank(v, b); });
    ctx.Phase(a.n, [&](int64_t b) { threads::SelectAvail(v, b); });
    ctx.Phase(1, [&](int64_t) { threads::SelectScan(v); });
    ctx.Phase(a.n, [&](int64_t i) { threads::SelectWrite(v, i); });
  };
  return op;
}

}  // namespace ckv::kernels::device
