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

threads::SelectItem ItemOf(const SelectArgs& a) {
  threads::SelectItem it;
  it.scores = a.scores.addr;
  it.seg_first = a.seg_first.addr;
  it.seg_size = a.seg_size.addr;
  it.member_first = a.member_first.addr;
  it.member_last = a.member_last.addr;
  it.members = a.members.addr;
  it.scratch = a.scratch.addr;
  it.out = a.out.addr;
  it.totals = a.totals.addr;
  it.n = a.n;
  it.n_members = a.n_members;
  it.budget = a.budget;
  it.recent_tokens = a.recent_tokens;
  it.max_out = a.max_out;
  it.n_segs = a.n_segs;
  it.page_size = a.page_size;
  it.mode = a.mode;
  return it;
}

threads::RowListItem RowListItemOf(const SelectArgs& a,
                                   const RowListTargets& t) {
  threads::RowListItem it;
  it.out = a.out.addr;
  it.totals = a.totals.addr;
  it.seg_first = a.seg_first.addr;
  it.member_first = a.member_first.addr;
  it.members = a.members.addr;
  it.seg_pos = t.seg_pos.addr;
  it.seg_sorted = t.seg_sorted.addr;
  it.rows = t.rows.addr;
  it.positions = t.positions.addr;
  it.ranges = t.ranges.addr;
  it.dest = t.dest.addr;
  it.seg_row_of = t.seg_row_of.addr;
  it.row_of = t.row_of.addr;
  it.n_row_of = t.n_row_of;
  it.n = a.n;
  it.n_members = a.n_members;
  it.cap = t.cap;
  it.max_out = a.max_out;
  it.n_segs = a.n_segs;
  it.page_size = a.page_size;
  return it;
}

namespace {

// The ranges select_blocks reads and writes for one problem.
void AddRanges(const threads::SelectItem& it, Op* op) {
  auto at = [](uint64_t addr) { return DevPtr{addr}; };
  op->reads.push_back(Of<float>(at(it.scores), it.n));
  op->reads.push_back(Of<int64_t>(at(it.seg_first), it.n_segs + 1));
  op->reads.push_back(Of<int64_t>(at(it.seg_size), it.n_segs));
  if (it.mode != threads::kSelectTopPages) {  // pages: no member tables
    op->reads.push_back(Of<int64_t>(at(it.member_first), it.n + 1));
    op->reads.push_back(Of<int32_t>(at(it.members), it.n_members));
    if (it.member_last != 0) {
      op->reads.push_back(Of<int64_t>(at(it.member_last), it.n));
    }
  }
  op->writes.push_back(
      Range{at(it.scratch), SelectScratchBytes(it.n, it.n_segs)});
  op->writes.push_back(Of<PlannedBlock>(at(it.out), it.max_out));
  op->writes.push_back(Of<PlanTotals>(at(it.totals), 1));
}

// Maps an address of a problem through the op's context.
auto ContextMap(OpContext& ctx) {
  return [&ctx](uint64_t addr, int64_t bytes, bool write) {
    return write ? static_cast<void*>(ctx.Out<char>(DevPtr{addr}, bytes))
                 : const_cast<char*>(ctx.In<char>(DevPtr{addr}, bytes));
  };
}

}  // namespace

Op SelectBlocksBatchOp(const SelectBatchArgs& a,
                       const std::vector<threads::SelectItem>& host_items) {
  Op op;
  op.name = "select_blocks_batch";
  op.reads = {Of<threads::SelectItem>(a.items, a.n_items)};
  for (const threads::SelectItem& it : host_items) AddRanges(it, &op);
  op.body = [a](OpContext& ctx) {
    // The device reads its problems from device memory.
    const auto* items = ctx.In<threads::SelectItem>(a.items, a.n_items);
    std::vector<threads::SelectView> views;
    std::vector<int64_t> first = {0};  // a thread per block: prefix
    for (int32_t i = 0; i < a.n_items; ++i) {
      views.push_back(threads::ViewOf(items[i], ContextMap(ctx)));
      first.push_back(first.back() + items[i].n);
    }
    const int64_t blocks = first.back();
    // Thread t of a per-block phase: item i, block t - first[i].
    auto per_block = [&](auto fn) {
      ctx.Phase(blocks, [&](int64_t t) {
        const int64_t i =
            std::upper_bound(first.begin(), first.end(), t) - first.begin() - 1;
        fn(views[i], t - first[i]);
      });
    };
    ctx.Phase(a.n_items, [&](int64_t i) { threads::SelectRecent(views[i]); });
    per_block([](const threads::SelectView& v, int64_t b) {
      threads::SelectAvail(v, b);
    });
    per_block([](const threads::SelectView& v, int64_t b) {
      threads::SelectTake(v, b);
    });
    ctx.Phase(a.n_items, [&](int64_t i) { threads::SelectTotals(views[i]); });
  };
  return op;
}

void DeclareRowListItem(const threads::RowListItem& it, Op* op) {
  auto at = [](uint64_t addr) { return DevPtr{addr}; };
  op->reads.push_back(Of<PlannedBlock>(at(it.out), it.max_out));
  op->reads.push_back(Of<PlanTotals>(at(it.totals), 1));
  op->reads.push_back(Of<int64_t>(at(it.seg_first), it.n_segs + 1));
  if (it.member_first != 0) {
    op->reads.push_back(Of<int64_t>(at(it.member_first), it.n + 1));
  }
  op->reads.push_back(Of<int32_t>(at(it.members), it.n_members));
  op->reads.push_back(Of<int64_t>(at(it.seg_pos), it.n_segs));
  op->reads.push_back(Of<int32_t>(at(it.seg_sorted), it.n_segs));
  op->reads.push_back(Of<int64_t>(at(it.seg_row_of), it.n_segs));
  if (it.n_row_of > 0) {
    op->reads.push_back(Of<int32_t>(at(it.row_of), it.n_row_of));
  }
  op->writes.push_back(Of<int32_t>(at(it.rows), it.cap));
  op->writes.push_back(Of<int64_t>(at(it.positions), it.cap));
  op->writes.push_back(Of<int64_t>(at(it.ranges), 2 * int64_t{it.n_segs}));
  op->writes.push_back(Of<int64_t>(at(it.dest), it.max_out));
}

Op RowListsBatchOp(const RowListsBatchArgs& a,
                   const std::vector<threads::RowListItem>& host_items) {
  Op op;
  op.name = "row_lists_batch";
  op.reads = {Of<threads::RowListItem>(a.items, a.n_items)};
  for (const threads::RowListItem& it : host_items) DeclareRowListItem(it, &op);
  op.body = [a](OpContext& ctx) {
    const auto* items = ctx.In<threads::RowListItem>(a.items, a.n_items);
    std::vector<threads::RowListView> views;
    std::vector<int64_t> first = {0};  // a thread per plan slot: prefix
    for (int32_t i = 0; i < a.n_items; ++i) {
      views.push_back(threads::ViewOf(items[i], ContextMap(ctx)));
      first.push_back(first.back() + items[i].max_out);
    }
    ctx.Phase(a.n_items, [&](int64_t i) { threads::RowListRanges(views[i]); });
    ctx.Phase(first.back(), [&](int64_t t) {
      const int64_t i =
          std::upper_bound(first.begin(), first.end(), t) - first.begin() - 1;
      threads::RowListFill(views[i], t - first[i]);
    });
  };
  return op;
}

Op SelectBlocksOp(const SelectArgs& a) {
  Op op;
  op.name = "select_blocks";
  const threads::SelectItem item = ItemOf(a);
  AddRanges(item, &op);
  op.body = [a, item](OpContext& ctx) {
    const threads::SelectView v = threads::ViewOf(item, ContextMap(ctx));
    ctx.Phase(1, [&](int64_t) { threads::SelectRecent(v); });
    ctx.Phase(a.n, [&](int64_t b) { threads::SelectAvail(v, b); });
    ctx.Phase(a.n, [&](int64_t b) { threads::SelectTake(v, b); });
    ctx.Phase(1, [&](int64_t) { threads::SelectTotals(v); });
  };
  return op;
}

}  // namespace ckv::kernels::device
