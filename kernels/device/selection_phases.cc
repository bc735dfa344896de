#include "kernels/device/selection_phases.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ckv::kernels::device {
namespace {

int64_t Align(int64_t n) { return (n + 255) / 256 * 256; }

template <class T>
Range Of(DevPtr p, int64_t count) {
  return Range{p, count * static_cast<int64_t>(sizeof(T))};
}

// The scratch arrays, laid out from one base.
struct Scratch {
  DevPtr order;         // int32 [n]: blocks in score order
  DevPtr avail;         // int32 [n]: rows of each block before recent
  DevPtr before;        // int64 [n]: tokens planned before position i
  DevPtr slot;          // int64 [n]: output index of position i, -1: none
  DevPtr recent_begin;  // int64 [n_segs]
};

Scratch ScratchOf(DevPtr base, int64_t n, int32_t n_segs) {
  Scratch s;
  DevPtr p = base;
  auto take = [&p](int64_t bytes) {
    const DevPtr at = p;
    p = p + Align(bytes);
    return at;
  };
  s.order = take(4 * n);
  s.avail = take(4 * n);
  s.before = take(8 * n);
  s.slot = take(8 * n);
  s.recent_begin = take(8 * int64_t{n_segs});
  return s;
}

// ScoreBefore (model/kv/selection.h) on block indices, NaN as -inf: the
// concatenation is segment-major, so "segment, then cluster" is the index.
bool Before(const float* scores, int64_t a, int64_t b) {
  const float inf = std::numeric_limits<float>::infinity();
  const float sa = std::isnan(scores[a]) ? -inf : scores[a];
  const float sb = std::isnan(scores[b]) ? -inf : scores[b];
  if (sa != sb) return sa > sb;
  return a < b;
}

// Phase 1 (one thread): AddRecentRows.
void PlanRecent(const SelectArgs& a, const int64_t* seg_size,
                int64_t* recent_begin, PlannedBlock* out, PlanTotals* t) {
  int64_t clustered = 0;
  for (int32_t s = 0; s < a.n_segs; ++s) clustered += seg_size[s];
  t->budget = std::min(a.budget, clustered);
  int64_t left = std::min(a.recent_tokens, t->budget);
  for (int32_t s = 0; s < a.n_segs; ++s) recent_begin[s] = seg_size[s];
  for (int32_t s = a.n_segs - 1; s >= 0 && left > 0; --s) {
    const int64_t size = seg_size[s];
    const int64_t take = std::min(left, size);
    recent_begin[s] = size - take;
    left -= take;
    for (int64_t row = size - take; row < size;) {
      const int64_t page = row / a.page_size;
      const int64_t end = std::min(size, (page + 1) * a.page_size);
      if (t->blocks >= a.max_out) {
        t->blocks = -1;
        return;
      }
      out[t->blocks++] = {s, kPlannedPage, static_cast<int32_t>(page),
                          static_cast<int32_t>(row - page * a.page_size),
                          static_cast<int32_t>(end - row)};
      t->tokens += end - row;
      row = end;
    }
  }
  t->recent_blocks = t->blocks;
  t->recent_tokens = t->tokens;
}

}  // namespace

int64_t SelectScratchBytes(int64_t n, int32_t n_segs) {
  return 2 * Align(4 * n) + 2 * Align(8 * n) + Align(8 * int64_t{n_segs});
}

int64_t MaxPlannedBlocks(int64_t n, int32_t n_segs, int64_t recent_tokens,
                         int32_t page_size) {
  return n + recent_tokens / std::max(1, page_size) + 2 * int64_t{n_segs};
}

Op SelectBlocksOp(const SelectArgs& a) {
  const Scratch sc = ScratchOf(a.scratch, a.n, a.n_segs);
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
  op.body = [a, sc](OpContext& ctx) {
    const float* scores = ctx.In<float>(a.scores, a.n);
    const int64_t* seg_first = ctx.In<int64_t>(a.seg_first, a.n_segs + 1);
    const int64_t* seg_size = ctx.In<int64_t>(a.seg_size, a.n_segs);
    const int64_t* member_first = ctx.In<int64_t>(a.member_first, a.n + 1);
    const int64_t* member_last =
        a.member_last.null() ? nullptr : ctx.In<int64_t>(a.member_last, a.n);
    const int32_t* members = ctx.In<int32_t>(a.members, a.n_members);
    int32_t* order = ctx.Out<int32_t>(sc.order, a.n);
    int32_t* avail = ctx.Out<int32_t>(sc.avail, a.n);
    int64_t* before = ctx.Out<int64_t>(sc.before, a.n);
    int64_t* slot = ctx.Out<int64_t>(sc.slot, a.n);
    int64_t* recent_begin = ctx.Out<int64_t>(sc.recent_begin, a.n_segs);
    PlannedBlock* out = ctx.Out<PlannedBlock>(a.out, a.max_out);
    PlanTotals* totals = ctx.Out<PlanTotals>(a.totals, 1);

    ctx.Phase(1, [&](int64_t) {
      *totals = PlanTotals{};
      PlanRecent(a, seg_size, recent_begin, out, totals);
    });
    // The rank of block b is the number of blocks before it: a total
    // order, so the ranks are a permutation.
    ctx.Phase(a.n, [&](int64_t b) {
      int64_t rank = 0;
      for (int64_t o = 0; o < a.n; ++o) rank += Before(scores, o, b);
      order[rank] = static_cast<int32_t>(b);
    });
    ctx.Phase(a.n, [&](int64_t b) {
      const int64_t s =
          std::upper_bound(seg_first, seg_first + a.n_segs + 1, b) - seg_first -
          1;
      const int64_t lo = member_first[b];
      const int64_t hi =
          member_last != nullptr ? member_last[b] : member_first[b + 1];
      if (s < 0 || s >= a.n_segs || lo < 0 || hi < lo || hi > a.n_members) {
        avail[b] = 0;  // a malformed plan attends nothing of the block
        return;
      }
      avail[b] = static_cast<int32_t>(
          recent_begin[s] >= seg_size[s]
              ? hi - lo
              : std::lower_bound(members + lo, members + hi, recent_begin[s]) -
                    (members + lo));
    });
    ctx.Phase(1, [&](int64_t) {
      if (totals->blocks < 0) return;
      int64_t tokens = totals->tokens, blocks = totals->blocks;
      for (int64_t i = 0; i < a.n; ++i) {
        before[i] = tokens;
        const int64_t take =
            std::min<int64_t>(avail[order[i]], totals->budget - tokens);
        slot[i] = take > 0 ? blocks++ : -1;
        if (take > 0) tokens += take;
      }
      if (blocks > a.max_out) {
        totals->blocks = -1;
        return;
      }
      totals->blocks = blocks;
      totals->tokens = tokens;
    });
    ctx.Phase(a.n, [&](int64_t i) {
      if (totals->blocks < 0 || slot[i] < 0) return;
      const int32_t b = order[i];
      const int64_t s =
          std::upper_bound(seg_first, seg_first + a.n_segs + 1, b) - seg_first -
          1;
      out[slot[i]] = {static_cast<int32_t>(s), kPlannedCluster,
                      static_cast<int32_t>(b - seg_first[s]), 0,
                      static_cast<int32_t>(std::min<int64_t>(
                          avail[b], totals->budget - before[i]))};
    });
  };
  return op;
}

}  // namespace ckv::kernels::device
