// The per-thread bodies of the selection ops (score_clusters and
// select_blocks, kernels/device/phases.h and selection_phases.h), written
// once for the host and the device: the fake runs them inside its phases
// (OpContext::Phase), kernels/cuda/selection_ops.cu runs the same functions
// as one kernel per phase. Plain C++ over raw pointers (no absl, no std
// algorithms): this header is compiled by nvcc too.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/device/op_tables.h"
#include "kernels/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define CKV_HD __host__ __device__ inline
#else
#define CKV_HD inline
#endif

namespace ckv::kernels::device::threads {

inline constexpr int kPanelWidth = 16;  // = phases.h kPanelWidth

// Exact F16 -> F32 (every F16 is an F32).
CKV_HD float HalfToFloat(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return F16ToF32(h);
#endif
}

// The score of centroid c for query q: acc = fma(q[d], f16(c[d]), acc) in
// element order from 0, each step one correctly rounded fma (std::fma on
// the host, __fmaf_rn on the device): the CPU's CentroidScores bits.
CKV_HD float ScoreCluster(const float* q, const uint16_t* panels, int64_t c,
                          int dim) {
  const uint16_t* col =
      panels + (c / kPanelWidth) * dim * kPanelWidth + c % kPanelWidth;
  float acc = 0.0f;
  for (int d = 0; d < dim; ++d) {
#if defined(__CUDA_ARCH__)
    acc = __fmaf_rn(q[d], HalfToFloat(col[d * kPanelWidth]), acc);
#else
    acc = std::fma(q[d], HalfToFloat(col[d * kPanelWidth]), acc);
#endif
  }
  return acc;
}

// Quest's page bound score lanes (KernelSet::quest_scores' contract,
// kernels/cpu/kernel_set.h): element d of the query adds to lane d % 16.
inline constexpr int kQuestLanes = 16;

// x * y and x + y, each correctly rounded on its own (no contraction into
// an fma on the device).
CKV_HD float MulRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}
CKV_HD float AddRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}

// Quest's score of one page for query q: the CPU's QuestScores bits
// (every kernel set computes them, kernel_set.h quest_scores): lane l sums
// max(q[d] * mx[d], q[d] * mn[d]) over d = l, l + 16, ... in d order from
// +0 (max as the vector max: the first product only when it is greater),
// then the lanes fold in halves: l + (l + 8), then + 4, + 2, + 1.
CKV_HD float QuestPageScore(const float* q, const float* mn, const float* mx,
                            int dim) {
  float lane[kQuestLanes] = {};
  for (int d0 = 0; d0 < dim; d0 += kQuestLanes) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int l = 0; l < kQuestLanes; ++l) {
      const int d = d0 + l;
      if (d < dim) {
        const float hi = MulRn(q[d], mx[d]);
        const float lo = MulRn(q[d], mn[d]);
        lane[l] = AddRn(lane[l], hi > lo ? hi : lo);
      }
    }
  }
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int half = kQuestLanes / 2; half >= 1; half /= 2) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int l = 0; l < kQuestLanes / 2; ++l) {
      if (l < half) lane[l] = AddRn(lane[l], lane[l + half]);
    }
  }
  return lane[0];
}

// Quest's page score for a group of n_q queries (rows of dim floats): the
// queries' scores summed in order from +0, as QuestPolicy::Plan sums them.
CKV_HD float QuestGroupScore(const float* qs, int n_q, const float* mn,
                             const float* mx, int dim) {
  float sum = 0.0f;
  for (int j = 0; j < n_q; ++j) {
    sum = AddRn(sum, QuestPageScore(qs + int64_t{j} * dim, mn, mx, dim));
  }
  return sum;
}

// First index in [lo, hi) of a[] whose value is > v (a ascending).
CKV_HD int64_t UpperBound(const int64_t* a, int64_t lo, int64_t hi, int64_t v) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a[mid] <= v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// First index in [lo, hi) of a[] whose value is >= v (a ascending).
CKV_HD int64_t LowerBound(const int32_t* a, int64_t lo, int64_t hi, int64_t v) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a[mid] < v) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

CKV_HD int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// What select_take's last taken block found (scratch): the cluster blocks
// taken and their tokens, for select_totals.
struct TakenSum {
  int64_t blocks = 0;
  int64_t tokens = 0;
};
static_assert(sizeof(TakenSum) == 16);

// What select_blocks plans. kSelectFillBudget (clusterkv, PlanFromScores):
// the recent pages, then whole clusters by score until the budget left is
// planned, the last one trimmed. kSelectTopPages (quest, QuestPolicy::Plan):
// the blocks are pages (block b of segment s is page b - seg_first[s], of
// min(page_size, seg_size[s] - page * page_size) rows; no member tables),
// and the plan is the best min(n, ceil(budget / page_size)) of them by
// score, whole, in score order: no recent pages, no trimming.
enum SelectMode : int32_t { kSelectFillBudget = 0, kSelectTopPages = 1 };

// select_blocks over pointers (SelectArgs of selection_phases.h, mapped):
// inputs, the scratch arrays and the outputs.
struct SelectView {
  const float* scores = nullptr;
  int64_t n = 0;
  const int64_t* seg_first = nullptr;  // [n_segs + 1]
  const int64_t* seg_size = nullptr;   // [n_segs]
  int32_t n_segs = 0;
  const int64_t* member_first = nullptr;  // [n + 1]
  const int64_t* member_last = nullptr;   // [n] or null
  const int32_t* members = nullptr;
  int64_t n_members = 0;
  int64_t budget = 0, recent_tokens = 0;
  int32_t page_size = 16;
  int32_t mode = kSelectFillBudget;  // SelectMode
  int64_t max_out = 0;
  int32_t* avail = nullptr;         // [n]
  int64_t* recent_begin = nullptr;  // [n_segs]
  TakenSum* taken = nullptr;
  PlannedBlock* out = nullptr;  // [max_out]
  PlanTotals* totals = nullptr;
};

// ScoreBefore (model/kv/selection.h) on block indices, NaN as -inf: the
// concatenation is segment-major, so "segment, then cluster" is the index.
CKV_HD bool Before(const float* scores, int64_t a, int64_t b) {
  const float sa = scores[a] != scores[a] ? -INFINITY : scores[a];  // NaN
  const float sb = scores[b] != scores[b] ? -INFINITY : scores[b];
  if (sa != sb) return sa > sb;
  return a < b;
}

// Segment of block b (seg_first ascending).
CKV_HD int64_t SegmentOf(const SelectView& v, int64_t b) {
  return UpperBound(v.seg_first, 0, v.n_segs + 1, b) - 1;
}

// Phase 1 (one thread): the totals and the taken sum reset, then
// AddRecentRows: the recent_tokens most recent rows as pages, the last
// segment first.
CKV_HD void SelectRecent(const SelectView& v) {
  PlanTotals* t = v.totals;
  *t = PlanTotals{};
  *v.taken = TakenSum{};
  if (v.page_size <= 0) {  // malformed (a batch's items are not validated)
    t->blocks = -1;
    return;
  }
  int64_t clustered = 0;
  for (int32_t s = 0; s < v.n_segs; ++s) clustered += v.seg_size[s];
  t->budget = Min64(v.budget, clustered);
  // Quest plans no recent pages.
  int64_t left =
      v.mode == kSelectTopPages ? 0 : Min64(v.recent_tokens, t->budget);
  for (int32_t s = 0; s < v.n_segs; ++s) v.recent_begin[s] = v.seg_size[s];
  for (int32_t s = v.n_segs - 1; s >= 0 && left > 0; --s) {
    const int64_t size = v.seg_size[s];
    const int64_t take = Min64(left, size);
    v.recent_begin[s] = size - take;
    left -= take;
    for (int64_t row = size - take; row < size;) {
      const int64_t page = row / v.page_size;
      const int64_t end = Min64(size, (page + 1) * v.page_size);
      if (t->blocks >= v.max_out) {
        t->blocks = -1;
        return;
      }
      PlannedBlock& o = v.out[t->blocks++];
      o.segment = s;
      o.kind = kPlannedPage;
      o.id = static_cast<int32_t>(page);
      o.begin = static_cast<int32_t>(row - page * v.page_size);
      o.count = static_cast<int32_t>(end - row);
      t->tokens += end - row;
      row = end;
    }
  }
  t->recent_blocks = t->blocks;
  t->recent_tokens = t->tokens;
}

// The rows of page block b (kSelectTopPages), 0 when malformed.
CKV_HD int32_t PageBlockRows(const SelectView& v, int64_t b) {
  const int64_t s = SegmentOf(v, b);
  if (s < 0 || s >= v.n_segs || v.page_size <= 0) return 0;
  const int64_t left =
      v.seg_size[s] - (b - v.seg_first[s]) * int64_t{v.page_size};
  return left <= 0 ? 0 : static_cast<int32_t>(Min64(v.page_size, left));
}

// Phase 2 (a thread per block): its rows before the recent range (a page
// block: its rows).
CKV_HD void SelectAvail(const SelectView& v, int64_t b) {
  if (v.mode == kSelectTopPages) {
    v.avail[b] = PageBlockRows(v, b);
    return;
  }
  const int64_t s = SegmentOf(v, b);
  const int64_t lo = v.member_first[b];
  const int64_t hi =
      v.member_last != nullptr ? v.member_last[b] : v.member_first[b + 1];
  if (s < 0 || s >= v.n_segs || lo < 0 || hi < lo || hi > v.n_members) {
    v.avail[b] = 0;  // a malformed plan attends nothing of the block
    return;
  }
  v.avail[b] = static_cast<int32_t>(
      v.recent_begin[s] >= v.seg_size[s]
          ? hi - lo
          : LowerBound(v.members, lo, hi, v.recent_begin[s]) - lo);
}

// Phase 3 (a thread per block): is block b taken, and where. Only blocks
// with rows (avail > 0) take a place, in score order, until the budget
// left after the recent pages is planned; so b is taken iff the rows of
// the blocks with rows before it are fewer than that, and its place is
// the count of those blocks. The thread stops as soon as that sum reaches
// the budget (most blocks, after a few of the best): far less than the
// n comparisons of a full rank, which only taken blocks make. Threads
// only read the totals; the last taken block (the one that fills the
// budget, or the last block with rows) leaves the taken sum for phase 4.
CKV_HD void SelectTopPage(const SelectView& v, int64_t b);

CKV_HD void SelectTake(const SelectView& v, int64_t b) {
  if (v.mode == kSelectTopPages) {
    SelectTopPage(v, b);
    return;
  }
  const PlanTotals* t = v.totals;
  const int64_t need = t->budget - t->recent_tokens;
  if (t->blocks < 0 || v.avail[b] <= 0 || need <= 0) return;
  int64_t rows_before = 0, blocks_before = 0, blocks_after = 0;
  for (int64_t o = 0; o < v.n; ++o) {
    if (o == b || v.avail[o] <= 0) continue;
    if (!Before(v.scores, o, b)) {
      ++blocks_after;
      continue;
    }
    rows_before += v.avail[o];
    if (rows_before >= need) return;  // the budget is planned before b
    ++blocks_before;
  }
  const int64_t count = Min64(v.avail[b], need - rows_before);
  const int64_t slot = t->recent_blocks + blocks_before;
  if (slot < v.max_out) {
    const int64_t s = SegmentOf(v, b);
    PlannedBlock& o = v.out[slot];
    o.segment = static_cast<int32_t>(s);
    o.kind = kPlannedCluster;
    o.id = static_cast<int32_t>(b - v.seg_first[s]);
    o.begin = 0;
    o.count = static_cast<int32_t>(count);
  }
  if (rows_before + count >= need || blocks_after == 0) {
    *v.taken = TakenSum{blocks_before + 1, rows_before + count};
  }
}

// The pages kSelectTopPages takes: min(blocks, ceil(budget / page_size)).
CKV_HD int64_t TopPagesWanted(const SelectView& v) {
  if (v.budget <= 0 || v.page_size <= 0) return 0;
  return Min64(v.n, (v.budget + v.page_size - 1) / v.page_size);
}

// Phase 3 of kSelectTopPages (a thread per block): page b is taken iff
// fewer than the wanted pages come before it in score order, at the place
// their count gives, whole. The thread stops once the wanted pages are
// before it; the last taken page (the wanted-th, or the last page of all)
// leaves the taken sum.
CKV_HD void SelectTopPage(const SelectView& v, int64_t b) {
  const PlanTotals* t = v.totals;
  const int64_t want = TopPagesWanted(v);
  if (t->blocks < 0 || v.avail[b] <= 0 || want <= 0) return;
  int64_t rows_before = 0, blocks_before = 0, blocks_after = 0;
  for (int64_t o = 0; o < v.n; ++o) {
    if (o == b || v.avail[o] <= 0) continue;
    if (!Before(v.scores, o, b)) {
      ++blocks_after;
      continue;
    }
    if (++blocks_before >= want) return;  // the wanted pages come before b
    rows_before += v.avail[o];
  }
  const int64_t slot = t->recent_blocks + blocks_before;
  if (slot < v.max_out) {
    const int64_t s = SegmentOf(v, b);
    PlannedBlock& o = v.out[slot];
    o.segment = static_cast<int32_t>(s);
    o.kind = kPlannedPage;
    o.id = static_cast<int32_t>(b - v.seg_first[s]);
    o.begin = 0;
    o.count = v.avail[b];
  }
  if (blocks_before + 1 == want || blocks_after == 0) {
    *v.taken = TakenSum{blocks_before + 1, rows_before + v.avail[b]};
  }
}

// Phase 4 (one thread): the totals with the taken blocks; a plan past
// max_out is refused (blocks = -1).
CKV_HD void SelectTotals(const SelectView& v) {
  PlanTotals* t = v.totals;
  if (t->blocks < 0) return;
  const int64_t blocks = t->blocks + v.taken->blocks;
  if (blocks > v.max_out) {
    t->blocks = -1;
    return;
  }
  t->blocks = blocks;
  t->tokens += v.taken->tokens;
}

// ---- Batches: every planned query of a planner call in one op ----------

// What a batch's score item scores (ScoreItem::kind).
enum ScoreKind : int32_t {
  // clusterkv: the n clusters' F16 centroid panels for each of n_q
  // queries (ScoreCluster), scores [n_q][ld].
  kScoreClusters = 0,
  // quest: the n pages' F32 bounds, page_min [n][dim] followed by page_max
  // [n][dim] at panel_offset (uint16 elements, even) of the panel pool;
  // one score per page, the n_q queries' scores summed (QuestGroupScore),
  // scores [n].
  kScoreQuestPages = 1,
};

// One score_clusters problem of a batch (phases.h ScoreClustersBatchOp):
// element offsets into the batch's pools.
struct ScoreItem {
  int64_t q_offset = 0;      // floats into q_pool: [n_q][dim]
  int64_t panel_offset = 0;  // uint16 into panel_pool: PanelElements(n, dim)
  int64_t score_offset = 0;  // floats into score_pool: [n_q][ld]
  int32_t n_q = 0;
  int32_t n = 0;
  int32_t ld = 0;
  int32_t kind = kScoreClusters;  // ScoreKind
};
// The structs of this header cross between the host compiler and nvcc in
// device memory: their layouts are pinned.
static_assert(sizeof(ScoreItem) == 40);

// The threads of a score item: one per (query, cluster), or per page.
CKV_HD int64_t ScoreItemThreads(const ScoreItem& it) {
  if (it.n <= 0) return 0;
  return it.kind == kScoreQuestPages ? it.n : int64_t{it.n_q} * it.n;
}

// The pools of a score batch, as the thread bodies read them.
struct ScorePools {
  const float* q = nullptr;
  int64_t q_elems = 0;
  const uint16_t* panels = nullptr;
  int64_t panel_elems = 0;
  float* scores = nullptr;
  int64_t score_elems = 0;
  int dim = 0;
};

// Thread `local` of score item `it` (< ScoreItemThreads): one score. The
// offsets come from the plan: checked, an out-of-range item writes
// nothing (as a device kernel that would trap).
CKV_HD void ScoreItemThread(const ScoreItem& it, int64_t local,
                            const ScorePools& p) {
  const int64_t dim = p.dim;
  if (it.n <= 0 || it.q_offset < 0 || it.panel_offset < 0 ||
      it.score_offset < 0 || dim <= 0) {
    return;
  }
  if (it.kind == kScoreQuestPages) {
    const int64_t bounds = int64_t{it.n} * dim;  // floats of each array
    const int64_t s_at = it.score_offset + local;
    if (it.panel_offset % 2 != 0 || it.n_q <= 0 ||
        it.q_offset + it.n_q * dim > p.q_elems ||
        it.panel_offset + 4 * bounds > p.panel_elems || s_at >= p.score_elems) {
      return;
    }
    const float* mn =
        reinterpret_cast<const float*>(p.panels + it.panel_offset);
    p.scores[s_at] =
        QuestGroupScore(p.q + it.q_offset, it.n_q, mn + local * dim,
                        mn + bounds + local * dim, static_cast<int>(dim));
    return;
  }
  const int64_t j = local / it.n, c = local % it.n;
  const int64_t q_at = it.q_offset + j * dim;
  const int64_t s_at = it.score_offset + j * it.ld + c;
  const int64_t panel_elems =
      (int64_t{it.n} + kPanelWidth - 1) / kPanelWidth * kPanelWidth * dim;
  if (q_at + dim > p.q_elems || it.panel_offset + panel_elems > p.panel_elems ||
      s_at >= p.score_elems) {
    return;
  }
  p.scores[s_at] = ScoreCluster(p.q + q_at, p.panels + it.panel_offset, c,
                                static_cast<int>(dim));
}

// One store's planned queries gathered from its query rows on the device
// (the planner's gather_queries op): src is float [n_kv * group][hd] (the
// part's post-RoPE query row); the planned queries go to dst_offset
// (floats into the call's query pool) as [n_kv][nq][hd], nq = group, or 1
// with `shared` (per_kv_head: the group's queries summed in order from
// 0.0f, as the policy and the host planner sum them).
struct QueryItem {
  uint64_t src = 0;
  int64_t dst_offset = 0;
  int32_t n_kv = 0, group = 0, hd = 0, shared = 0;
};
static_assert(sizeof(QueryItem) == 32);

// Element d of KV head g's planned queries of `it`.
CKV_HD void GatherQuery(const QueryItem& it, const float* src, float* dst,
                        int64_t g, int64_t d) {
  const int64_t hd = it.hd;
  if (it.shared == 0 || it.group == 1) {
    for (int64_t j = 0; j < it.group; ++j) {
      dst[(g * it.group + j) * hd + d] = src[(g * it.group + j) * hd + d];
    }
    return;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < it.group; ++i)
    sum += src[(g * it.group + i) * hd + d];
  dst[g * hd + d] = sum;
}

// The select_blocks scratch for n blocks over n_segs segments: avail
// (int32 [n]), recent_begin (int64 [n_segs]), taken (TakenSum), each
// 256-byte aligned; offsets from the scratch's start.
struct SelectScratch {
  int64_t avail = 0, recent_begin = 0, taken = 0;
  int64_t bytes = 0;
};
CKV_HD int64_t Align256(int64_t b) { return (b + 255) / 256 * 256; }
CKV_HD SelectScratch SelectScratchLayout(int64_t n, int32_t n_segs) {
  SelectScratch l;
  l.recent_begin = l.avail + Align256(4 * n);
  l.taken = l.recent_begin + Align256(8 * int64_t{n_segs});
  l.bytes = l.taken + Align256(static_cast<int64_t>(sizeof(TakenSum)));
  return l;
}

// One select_blocks problem as it lies in device memory (a batch's items,
// select_blocks_batch): selection_phases.h SelectArgs with plain device
// addresses (member_last 0: none).
struct SelectItem {
  uint64_t scores = 0, seg_first = 0, seg_size = 0, member_first = 0,
           member_last = 0, members = 0, scratch = 0, out = 0, totals = 0;
  int64_t n = 0, n_members = 0, budget = 0, recent_tokens = 0, max_out = 0;
  int32_t n_segs = 0, page_size = 16;
  int32_t mode = kSelectFillBudget;  // SelectMode (kSelectTopPages: the
                                     // member tables are not read, may be 0)
  int32_t pad = 0;
};
static_assert(sizeof(SelectItem) == 128);

// The view of `it`: every address through map(addr, bytes, write) ->
// void* (the fake's OpContext, or the address itself on a GPU).
template <class Map>
CKV_HD SelectView ViewOf(const SelectItem& it, Map&& map) {
  SelectView v;
  v.scores = static_cast<const float*>(map(it.scores, 4 * it.n, false));
  v.n = it.n;
  v.seg_first = static_cast<const int64_t*>(
      map(it.seg_first, 8 * (int64_t{it.n_segs} + 1), false));
  v.seg_size =
      static_cast<const int64_t*>(map(it.seg_size, 8 * it.n_segs, false));
  v.n_segs = it.n_segs;
  v.mode = it.mode;
  if (it.mode != kSelectTopPages) {  // page blocks read no member tables
    v.member_first = static_cast<const int64_t*>(
        map(it.member_first, 8 * (it.n + 1), false));
    v.member_last =
        it.member_last == 0
            ? nullptr
            : static_cast<const int64_t*>(map(it.member_last, 8 * it.n, false));
    v.members =
        static_cast<const int32_t*>(map(it.members, 4 * it.n_members, false));
    v.n_members = it.n_members;
  }
  v.budget = it.budget;
  v.recent_tokens = it.recent_tokens;
  v.page_size = it.page_size;
  v.max_out = it.max_out;
  const SelectScratch l = SelectScratchLayout(it.n, it.n_segs);
  v.avail = static_cast<int32_t*>(map(it.scratch + l.avail, 4 * it.n, true));
  v.recent_begin = static_cast<int64_t*>(
      map(it.scratch + l.recent_begin, 8 * int64_t{it.n_segs}, true));
  v.taken = static_cast<TakenSum*>(
      map(it.scratch + l.taken, static_cast<int64_t>(sizeof(TakenSum)), true));
  v.out = static_cast<PlannedBlock*>(map(
      it.out, it.max_out * static_cast<int64_t>(sizeof(PlannedBlock)), true));
  v.totals = static_cast<PlanTotals*>(
      map(it.totals, static_cast<int64_t>(sizeof(PlanTotals)), true));
  return v;
}

// A view's map on a device: the item's addresses are the pointers (the
// fake maps them through its OpContext instead).
struct DeviceAddressMap {
  CKV_HD void* operator()(uint64_t addr, int64_t, bool) const {
    return reinterpret_cast<void*>(addr);
  }
};

// ---- Row lists: a plan's rows and positions, built on the device --------

// One planned query's row lists (the planner's row_lists op), after its
// select_blocks item: the stored rows and the positions of its plan's
// blocks, grouped by segment in segment order, each segment's blocks in
// plan order (the host store's GatherRows order); ranges[s] = {first, n},
// the entries of segment s. A cluster block's members are segment rows;
// in a segment stored by cluster (seg_sorted 1) the stored row of member
// m of the pool is m - member_first[seg_first[s]] (cluster 0's first
// member), else the member itself. A page block's rows are segment rows;
// stored in position order they are the stored rows, by cluster the
// stored row of segment row r is row_of[seg_row_of[s] + r] (a segment
// without row_of, seg_row_of[s] < 0, leaves its page blocks out). Entries
// past `cap` are left out; malformed blocks attend nothing. A plan of
// pages only (quest) has no member tables: member_first 0 (its cluster
// blocks would be left out), seg_first then counts no clusters (zeros).
struct RowListItem {
  uint64_t out = 0, totals = 0;  // the plan (PlannedBlock, PlanTotals)
  uint64_t seg_first = 0, member_first = 0, members = 0;  // block table
  uint64_t seg_pos = 0;     // int64 [n_segs]: position of segment row 0
  uint64_t seg_sorted = 0;  // int32 [n_segs]
  uint64_t rows = 0;        // int32 [cap]
  uint64_t positions = 0;   // int64 [cap]
  uint64_t ranges = 0;      // int64 [n_segs][2]
  uint64_t dest = 0;        // int64 [max_out] scratch: a block's first entry
  uint64_t seg_row_of = 0;  // int64 [n_segs]: each segment's row_of, or -1
  uint64_t row_of = 0;      // int32 [n_row_of]
  int64_t n = 0;            // blocks of the table
  int64_t n_members = 0, cap = 0, max_out = 0, n_row_of = 0;
  int32_t n_segs = 0, page_size = 16;
};
static_assert(sizeof(RowListItem) == 152);

struct RowListView {
  const PlannedBlock* out = nullptr;
  const PlanTotals* totals = nullptr;
  const int64_t* seg_first = nullptr;
  const int64_t* member_first = nullptr;
  const int32_t* members = nullptr;
  const int64_t* seg_pos = nullptr;
  const int32_t* seg_sorted = nullptr;
  int32_t* rows = nullptr;
  int64_t* positions = nullptr;
  int64_t* ranges = nullptr;
  int64_t* dest = nullptr;
  const int64_t* seg_row_of = nullptr;
  const int32_t* row_of = nullptr;
  int64_t n = 0, n_members = 0, cap = 0, max_out = 0, n_row_of = 0;
  int32_t n_segs = 0, page_size = 16;
};

template <class Map>
CKV_HD RowListView ViewOf(const RowListItem& it, Map&& map) {
  RowListView v;
  v.out = static_cast<const PlannedBlock*>(map(
      it.out, it.max_out * static_cast<int64_t>(sizeof(PlannedBlock)), false));
  v.totals = static_cast<const PlanTotals*>(
      map(it.totals, static_cast<int64_t>(sizeof(PlanTotals)), false));
  v.seg_first = static_cast<const int64_t*>(
      map(it.seg_first, 8 * (int64_t{it.n_segs} + 1), false));
  v.member_first = it.member_first == 0
                       ? nullptr
                       : static_cast<const int64_t*>(
                             map(it.member_first, 8 * (it.n + 1), false));
  v.members =
      static_cast<const int32_t*>(map(it.members, 4 * it.n_members, false));
  v.seg_pos = static_cast<const int64_t*>(
      map(it.seg_pos, 8 * int64_t{it.n_segs}, false));
  v.seg_sorted = static_cast<const int32_t*>(
      map(it.seg_sorted, 4 * int64_t{it.n_segs}, false));
  v.rows = static_cast<int32_t*>(map(it.rows, 4 * it.cap, true));
  v.positions = static_cast<int64_t*>(map(it.positions, 8 * it.cap, true));
  v.ranges =
      static_cast<int64_t*>(map(it.ranges, 16 * int64_t{it.n_segs}, true));
  v.dest = static_cast<int64_t*>(map(it.dest, 8 * it.max_out, true));
  v.seg_row_of = static_cast<const int64_t*>(
      map(it.seg_row_of, 8 * int64_t{it.n_segs}, false));
  v.row_of =
      it.n_row_of <= 0
          ? nullptr
          : static_cast<const int32_t*>(map(it.row_of, 4 * it.n_row_of, false));
  v.n_row_of = it.n_row_of;
  v.n = it.n;
  v.n_members = it.n_members;
  v.cap = it.cap;
  v.max_out = it.max_out;
  v.n_segs = it.n_segs;
  v.page_size = it.page_size;
  return v;
}

// Whether plan block b is one row_lists reads (else it is left out).
CKV_HD bool ListedBlock(const RowListView& v, const PlannedBlock& o) {
  if (o.segment < 0 || o.segment >= v.n_segs || o.count <= 0 || o.begin < 0) {
    return false;
  }
  if (o.kind == kPlannedPage) {
    return v.seg_sorted[o.segment] == 0 || v.seg_row_of[o.segment] >= 0;
  }
  return o.kind == kPlannedCluster && v.member_first != nullptr && o.id >= 0 &&
         o.id < v.seg_first[o.segment + 1] - v.seg_first[o.segment];
}

// Row r of block (kind, id) of segment s (a listed block: ListedBlock):
// its segment row and its stored row (AppendBlockRows' order).
CKV_HD void BlockRow(const RowListView& v, int64_t s, int32_t kind, int32_t id,
                     int64_t r, int64_t* seg_row, int64_t* stored) {
  if (kind == kPlannedCluster) {
    const int64_t m = v.member_first[v.seg_first[s] + id] + r;
    *seg_row = m >= 0 && m < v.n_members ? v.members[m] : 0;
    *stored =
        v.seg_sorted[s] != 0 ? m - v.member_first[v.seg_first[s]] : *seg_row;
    return;
  }
  *seg_row = int64_t{id} * v.page_size + r;
  const int64_t at = v.seg_row_of[s] + *seg_row;
  *stored = v.seg_sorted[s] == 0         ? *seg_row
            : at >= 0 && at < v.n_row_of ? v.row_of[at]
                                         : 0;
}

// Phase 1 (a thread per item): each segment's range and each block's first
// entry (segments in order, blocks of a segment in plan order).
CKV_HD void RowListRanges(const RowListView& v) {
  const int64_t blocks = v.totals->blocks < 0 ? 0 : v.totals->blocks;
  for (int32_t s = 0; s < v.n_segs; ++s) v.ranges[2 * s + 1] = 0;
  for (int64_t b = 0; b < blocks && b < v.max_out; ++b) {
    if (ListedBlock(v, v.out[b])) {
      v.ranges[2 * v.out[b].segment + 1] += v.out[b].count;
    }
  }
  int64_t at = 0;
  for (int32_t s = 0; s < v.n_segs; ++s) {
    const int64_t n = v.ranges[2 * s + 1];
    v.ranges[2 * s] = at < v.cap ? at : v.cap;
    v.ranges[2 * s + 1] = 0;  // the running count of the pass below
    at += n;
  }
  for (int64_t b = 0; b < blocks && b < v.max_out; ++b) {
    const PlannedBlock& o = v.out[b];
    if (!ListedBlock(v, o)) {
      v.dest[b] = -1;
      continue;
    }
    v.dest[b] = v.ranges[2 * o.segment] + v.ranges[2 * o.segment + 1];
    v.ranges[2 * o.segment + 1] += o.count;
  }
  for (int32_t s = 0; s < v.n_segs; ++s) {  // within cap
    const int64_t room = v.cap - v.ranges[2 * s];
    if (v.ranges[2 * s + 1] > room) v.ranges[2 * s + 1] = room;
  }
}

// Phase 2 (a thread per plan slot b < max_out): block b's entries.
CKV_HD void RowListFill(const RowListView& v, int64_t b) {
  const int64_t blocks = v.totals->blocks < 0 ? 0 : v.totals->blocks;
  if (b >= blocks || v.dest[b] < 0) return;
  const PlannedBlock& o = v.out[b];
  for (int64_t i = 0; i < o.count && v.dest[b] + i < v.cap; ++i) {
    int64_t seg_row = 0, stored = 0;
    BlockRow(v, o.segment, o.kind, o.id, o.begin + i, &seg_row, &stored);
    v.rows[v.dest[b] + i] = static_cast<int32_t>(stored);
    v.positions[v.dest[b] + i] = v.seg_pos[o.segment] + seg_row;
  }
}

}  // namespace ckv::kernels::device::threads
