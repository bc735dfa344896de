#include "kernels/device/phases.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/device/selection_threads.h"
#include "kernels/dtype.h"

namespace ckv::kernels::device {
namespace {

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
    const threads::ScorePools pools{
        q, a.q_elems, panels, a.panel_elems, scores, a.score_elems, a.dim};
    ctx.Phase(a.total_threads, [&](int64_t t) {
      // The item of thread t: binary search of the prefix.
      const int64_t i =
          std::upper_bound(base, base + a.n_items + 1, t) - base - 1;
      if (i < 0 || i >= a.n_items) return;
      const int64_t local = t - base[i];
      if (local >= threads::ScoreItemThreads(items[i])) return;
      threads::ScoreItemThread(items[i], local, pools);
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

}  // namespace ckv::kernels::device
