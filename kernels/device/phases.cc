#include "kernels/device/phases.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "kernels/device/selection_threads.h"
#include "kernels/dtype.h"

namespace ckv::kernels::device {
namespace {

int64_t Align(int64_t n) { return (n + 255) / 256 * 256; }

template <class T>
Range Of(DevPtr p, int64_t count) {
  return Range{p, count * static_cast<int64_t>(sizeof(T))};
}

}  // namespace

int64_t PanelElements(int64_t n, int dim) {
  return (n + kPanelWidth - 1) / kPanelWidth * kPanelWidth * dim;
}

float ScoreCluster(const float* q, const uint16_t* panels, int64_t c, int dim) {
  return threads::ScoreCluster(q, panels, c, dim);
}

Op ScoreClustersOp(const ScoreClustersArgs& a) {
  Op op;
  op.name = "score_clusters";
  op.reads = {Of<float>(a.q, int64_t{a.n_q} * a.dim),
              Of<uint16_t>(a.panels, PanelElements(a.n, a.dim))};
  op.writes = {Of<float>(a.scores, a.n_q > 0 ? (a.n_q - 1) * a.ld + a.n : 0)};
  op.body = [a](OpContext& ctx) {
    const float* q = ctx.In<float>(a.q, int64_t{a.n_q} * a.dim);
    const uint16_t* panels =
        ctx.In<uint16_t>(a.panels, PanelElements(a.n, a.dim));
    float* scores =
        ctx.Out<float>(a.scores, a.n_q > 0 ? (a.n_q - 1) * a.ld + a.n : 0);
    ctx.Phase(int64_t{a.n_q} * a.n, [&](int64_t t) {
      const int64_t j = t / a.n, c = t % a.n;
      scores[j * a.ld + c] = ScoreCluster(q + j * a.dim, panels, c, a.dim);
    });
  };
  return op;
}

Op ScoreClustersBatchOp(const ScoreBatchArgs& a) {
  Op op;
  op.name = "score_clusters_batch";
  op.reads = {Of<ScoreItem>(a.items, a.n_items),
              Of<int64_t>(a.thread_base, a.n_items + 1),
              Of<float>(a.q_pool, a.q_elems),
              Of<uint16_t>(a.panel_pool, a.panel_elems)};
  op.writes = {Of<float>(a.score_pool, a.score_elems)};
  op.body = [a](OpContext& ctx) {
    const ScoreItem* items = ctx.In<ScoreItem>(a.items, a.n_items);
    const int64_t* base = ctx.In<int64_t>(a.thread_base, a.n_items + 1);
    const float* q = ctx.In<float>(a.q_pool, a.q_elems);
    const uint16_t* panels = ctx.In<uint16_t>(a.panel_pool, a.panel_elems);
    float* scores = ctx.Out<float>(a.score_pool, a.score_elems);
    ctx.Phase(a.total_threads, [&](int64_t t) {
      // The item of thread t: binary search of the prefix.
      const int64_t i =
          std::upper_bound(base, base + a.n_items + 1, t) - base - 1;
      if (i < 0 || i >= a.n_items) return;
      const ScoreItem& it = items[i];
      const int64_t local = t - base[i];
      const int64_t j = local / it.n, c = local % it.n;
      const int64_t q_at = it.q_offset + j * a.dim;
      const int64_t s_at = it.score_offset + j * it.ld + c;
      // Offsets come from the plan: checked, as a device kernel would trap.
      if (it.q_offset < 0 || it.panel_offset < 0 || it.score_offset < 0 ||
          q_at + a.dim > a.q_elems ||
          it.panel_offset + PanelElements(it.n, a.dim) > a.panel_elems ||
          s_at >= a.score_elems) {
        return;
      }
      scores[s_at] = ScoreCluster(q + q_at, panels + it.panel_offset, c, a.dim);
    });
  };
  return op;
}

Op GatherQueriesOp(const GatherQueriesArgs& a,
                   const std::vector<QueryItem>& host_items) {
  Op op;
  op.name = "gather_queries";
  op.reads = {Of<QueryItem>(a.items, a.n_items)};
  for (const QueryItem& it : host_items) {
    op.reads.push_back(
        Of<float>(DevPtr{it.src}, int64_t{it.n_kv} * it.group * it.hd));
  }
  auto dst_elems = [](const QueryItem& it) {
    return int64_t{it.n_kv} * (it.shared != 0 ? 1 : it.group) * it.hd;
  };
  for (const QueryItem& it : host_items) {
    op.writes.push_back(Of<float>(a.pool + it.dst_offset * 4, dst_elems(it)));
  }
  op.body = [a, dst_elems](OpContext& ctx) {
    const QueryItem* items = ctx.In<QueryItem>(a.items, a.n_items);
    ctx.Phase(a.n_items, [&](int64_t i) {
      const QueryItem& it = items[i];
      // Destinations come from the plan: checked, as a kernel would trap.
      if (it.dst_offset < 0 || it.dst_offset + dst_elems(it) > a.pool_elems) {
        return;
      }
      const float* src =
          ctx.In<float>(DevPtr{it.src}, int64_t{it.n_kv} * it.group * it.hd);
      float* dst = ctx.Out<float>(a.pool + it.dst_offset * 4, dst_elems(it));
      for (int64_t g = 0; g < it.n_kv; ++g) {
        for (int64_t d = 0; d < it.hd; ++d) {
          threads::GatherQuery(it, src, dst, g, d);
        }
      }
    });
  };
  return op;
}

// ---- Residency -------------------------------------------------------------

int64_t ResidencyTableBytes(int32_t n_blocks, int32_t n_pages) {
  return 4 * Align(int64_t{4} * n_blocks) + Align(int64_t{8} * n_blocks) +
         2 * Align(int64_t{4} * n_pages) + Align(sizeof(ResidencyCounters)) +
         Align(int64_t{4} * n_blocks);
}

ResidencyTable MakeResidencyTable(DevPtr base, int32_t n_blocks,
                                  int32_t n_pages) {
  ResidencyTable t;
  t.n_blocks = n_blocks;
  t.n_pages = n_pages;
  DevPtr p = base;
  auto take = [&p](int64_t bytes) {
    const DevPtr at = p;
    p = p + Align(bytes);
    return at;
  };
  t.slot = take(int64_t{4} * n_blocks);
  t.last_used = take(int64_t{8} * n_blocks);
  t.size = take(int64_t{4} * n_blocks);
  t.first_req = take(int64_t{4} * n_blocks);
  t.next_page = take(int64_t{4} * n_pages);
  t.free_stack = take(int64_t{4} * n_pages);
  t.counters = take(sizeof(ResidencyCounters));
  t.evict = take(int64_t{4} * n_blocks);
  return t;
}

namespace {

// The table's arrays as an op body sees them.
struct TableView {
  int32_t* slot;
  int64_t* last_used;
  int32_t* size;
  int32_t* first_req;
  int32_t* next_page;
  int32_t* free_stack;
  ResidencyCounters* counters;
  int32_t* evict;
};

std::vector<Range> TableRanges(const ResidencyTable& t) {
  return {Of<int32_t>(t.slot, t.n_blocks),
          Of<int64_t>(t.last_used, t.n_blocks),
          Of<int32_t>(t.size, t.n_blocks),
          Of<int32_t>(t.first_req, t.n_blocks),
          Of<int32_t>(t.next_page, t.n_pages),
          Of<int32_t>(t.free_stack, t.n_pages),
          Of<ResidencyCounters>(t.counters, 1),
          Of<int32_t>(t.evict, t.n_blocks)};
}

TableView View(OpContext& ctx, const ResidencyTable& t) {
  return {ctx.Out<int32_t>(t.slot, t.n_blocks),
          ctx.Out<int64_t>(t.last_used, t.n_blocks),
          ctx.Out<int32_t>(t.size, t.n_blocks),
          ctx.Out<int32_t>(t.first_req, t.n_blocks),
          ctx.Out<int32_t>(t.next_page, t.n_pages),
          ctx.Out<int32_t>(t.free_stack, t.n_pages),
          ctx.Out<ResidencyCounters>(t.counters, 1),
          ctx.Out<int32_t>(t.evict, t.n_blocks)};
}

int32_t PagesOf(int32_t size) { return (size + kPageRows - 1) / kPageRows; }

// Single-thread phase: gives the flagged misses pages in request order.
void AssignPages(const TableView& v, const BlockRequest* req, int32_t n,
                 const int32_t* flag, int64_t step, MissCopy* misses) {
  ResidencyCounters& k = *v.counters;
  k.n_miss = 0;
  for (int32_t r = 0; r < n; ++r) {
    if (!flag[r]) continue;
    const int32_t pages = PagesOf(req[r].size);
    if (pages > k.free_top) {
      k.overflow = 1;
      continue;
    }
    int32_t first = -1;
    for (int32_t i = 0; i < pages; ++i) {  // pushes in reverse: list order
      const int32_t page = v.free_stack[--k.free_top];
      v.next_page[page] = first;
      first = page;
    }
    const int32_t b = req[r].block;
    v.slot[b] = first;
    v.last_used[b] = step;
    v.size[b] = req[r].size;
    k.resident_tokens += req[r].size;
    misses[k.n_miss++] = MissCopy{b, first, req[r].size};
  }
}

}  // namespace

Op InitResidencyOp(const ResidencyTable& t) {
  Op op;
  op.name = "init_residency";
  op.writes = TableRanges(t);
  op.body = [t](OpContext& ctx) {
    const TableView v = View(ctx, t);
    ctx.Phase(t.n_blocks, [&](int64_t b) {
      v.slot[b] = -1;
      v.last_used[b] = -1;
      v.size[b] = 0;
      v.first_req[b] = INT32_MAX;
      v.evict[b] = 0;
    });
    ctx.Phase(t.n_pages, [&](int64_t p) {
      v.free_stack[p] = static_cast<int32_t>(p);
      v.next_page[p] = -1;
    });
    ctx.Phase(1, [&](int64_t) {
      *v.counters = ResidencyCounters{};
      v.counters->free_top = t.n_pages;
    });
  };
  return op;
}

Op ResolveResidencyOp(const ResidencyTable& t, const ResolveArgs& a) {
  Op op;
  op.name = "resolve_residency";
  op.reads = {Of<BlockRequest>(a.requests, a.n_requests)};
  op.writes = TableRanges(t);
  op.writes.push_back(Of<int32_t>(a.scratch, a.n_requests));
  op.writes.push_back(Of<int32_t>(a.resolved, a.n_requests));
  op.writes.push_back(Of<MissCopy>(a.misses, a.n_requests));
  op.body = [t, a](OpContext& ctx) {
    const TableView v = View(ctx, t);
    const BlockRequest* req = ctx.In<BlockRequest>(a.requests, a.n_requests);
    int32_t* flag = ctx.Out<int32_t>(a.scratch, a.n_requests);
    int32_t* resolved = ctx.Out<int32_t>(a.resolved, a.n_requests);
    MissCopy* misses = ctx.Out<MissCopy>(a.misses, a.n_requests);
    ResidencyCounters& k = *v.counters;
    // 1: the first request of each block owns it (atomicMin on a device).
    ctx.Phase(a.n_requests, [&](int64_t r) {
      int32_t& owner = v.first_req[req[r].block];
      owner = std::min(owner, static_cast<int32_t>(r));
    });
    // 2: owners look their block up (counters: integer atomics).
    ctx.Phase(a.n_requests, [&](int64_t r) {
      const int32_t b = req[r].block;
      flag[r] = 0;
      if (v.first_req[b] != r || v.last_used[b] == a.step) return;
      ++k.lookups;
      if (v.slot[b] >= 0) {
        ++k.hits;
        k.hit_tokens += v.size[b];
        v.last_used[b] = a.step;
        return;
      }
      ++k.misses;
      k.miss_tokens += req[r].size;
      k.h2d_bytes += int64_t{a.bytes_per_token} * req[r].size;
      flag[r] = 1;
    });
    // 3: pages for the misses, in request order (one thread).
    ctx.Phase(1, [&](int64_t) {
      AssignPages(v, req, a.n_requests, flag, a.step, misses);
    });
    // 4: answers; the owner marks are reset for the next step.
    ctx.Phase(a.n_requests,
              [&](int64_t r) { resolved[r] = v.slot[req[r].block]; });
    ctx.Phase(a.n_requests,
              [&](int64_t r) { v.first_req[req[r].block] = INT32_MAX; });
  };
  return op;
}

Op EndResidencyStepOp(const ResidencyTable& t, int64_t step, int cache_steps) {
  Op op;
  op.name = "end_residency_step";
  op.writes = TableRanges(t);
  op.body = [t, step, cache_steps](OpContext& ctx) {
    const TableView v = View(ctx, t);
    ctx.Phase(t.n_blocks, [&](int64_t b) {
      v.evict[b] = v.slot[b] >= 0 && step - v.last_used[b] >= cache_steps;
    });
    ctx.Phase(1, [&](int64_t) {
      ResidencyCounters& k = *v.counters;
      for (int32_t b = 0; b < t.n_blocks; ++b) {
        if (!v.evict[b]) continue;
        for (int32_t p = v.slot[b]; p >= 0; p = v.next_page[p]) {
          v.free_stack[k.free_top++] = p;
        }
        k.resident_tokens -= v.size[b];
        v.slot[b] = -1;
        v.evict[b] = 0;
      }
    });
  };
  return op;
}

}  // namespace ckv::kernels::device
