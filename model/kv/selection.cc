#include "model/kv/selection.h"

#include <algorithm>

#include "kernels/cpu/cluster_ops.h"

namespace ckv {

namespace cpu = kernels::cpu;

int32_t BlockSize(const Segment& seg, int layer, int kv_head, BlockKind kind,
                  int32_t id, int page_size) {
  if (kind == BlockKind::kCluster) {
    const HeadIndex& h = seg.layer(layer).heads[kv_head];
    return h.offsets[id + 1] - h.offsets[id];
  }
  const int64_t begin = int64_t{id} * page_size;
  return static_cast<int32_t>(std::min<int64_t>(page_size, seg.size() - begin));
}

int32_t BlockRow(const Segment& seg, int layer, int kv_head, BlockKind kind,
                 int32_t id, int32_t r, int page_size) {
  if (kind == BlockKind::kCluster) {
    const HeadIndex& h = seg.layer(layer).heads[kv_head];
    return h.members[h.offsets[id] + r];
  }
  return id * page_size + r;
}

namespace {

int64_t ClusteredTokens(const PlanContext& ctx) {
  int64_t n = 0;
  for (const Segment* s : *ctx.segments) n += s->size();
  return n;
}

// Appends page blocks covering the last `n` clustered rows (in position
// order); returns, per segment, the first row that is "recent".
std::vector<int64_t> AddRecentRows(const PlanContext& ctx, int64_t n,
                                   int page_size, HeadPlan* out) {
  const auto& segs = *ctx.segments;
  std::vector<int64_t> recent_begin(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) recent_begin[i] = segs[i]->size();
  for (int64_t s = static_cast<int64_t>(segs.size()) - 1; s >= 0 && n > 0;
       --s) {
    const int64_t size = segs[s]->size();
    const int64_t take = std::min(n, size);
    recent_begin[s] = size - take;
    n -= take;
    for (int64_t row = size - take; row < size;) {
      const int32_t page = static_cast<int32_t>(row / page_size);
      const int64_t page_end = std::min<int64_t>(size, (page + 1) * int64_t{page_size});
      const int32_t begin = static_cast<int32_t>(row - int64_t{page} * page_size);
      const int32_t count = static_cast<int32_t>(page_end - row);
      out->blocks.push_back({static_cast<int32_t>(s), BlockKind::kPage, page,
                             begin, count});
      out->tokens += count;
      row = page_end;
    }
  }
  return recent_begin;
}

struct Scored {
  float score;
  int32_t segment;
  int32_t id;
};

bool ScoreBefore(const Scored& a, const Scored& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.segment != b.segment) return a.segment < b.segment;
  return a.id < b.id;
}

}  // namespace

void PlanClusterKv(const KvStoreConfig& config, const PlanContext& ctx,
                   const float* q, HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  const auto& segs = *ctx.segments;
  const int64_t budget =
      std::min<int64_t>(config.budget, ClusteredTokens(ctx));
  const std::vector<int64_t> recent_begin = AddRecentRows(
      ctx, std::min<int64_t>(config.recent_tokens, budget),
      config.quest_page_size, out);
  std::vector<Scored> order;
  std::vector<float> scores;
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    scores.resize(h.k);
    cpu::CentroidScores(q, h.centroids.data(), h.k, ctx.head_dim,
                        scores.data());
    for (int c = 0; c < h.k; ++c) {
      order.push_back({scores[c], static_cast<int32_t>(s), c});
    }
  }
  std::sort(order.begin(), order.end(), ScoreBefore);
  for (const Scored& o : order) {
    if (out->tokens >= budget) break;
    const HeadIndex& h = segs[o.segment]->layer(ctx.layer).heads[ctx.kv_head];
    const int32_t* first = h.members.data() + h.offsets[o.id];
    const int32_t* last = h.members.data() + h.offsets[o.id + 1];
    // Members ascend, so the rows before the recent range form a prefix.
    const int64_t available =
        std::lower_bound(first, last, recent_begin[o.segment]) - first;
    const int64_t take = std::min(available, budget - out->tokens);
    if (take <= 0) continue;
    out->blocks.push_back({o.segment, BlockKind::kCluster, o.id, 0,
                           static_cast<int32_t>(take)});
    out->tokens += take;
  }
}

void PlanQuest(const KvStoreConfig& config, const PlanContext& ctx,
               const float* const* qs, int n_q, HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  const auto& segs = *ctx.segments;
  std::vector<Scored> order;
  std::vector<float> scores, sum;
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    const int64_t pages = h.page_min.size() / ctx.head_dim;
    sum.assign(pages, 0.0f);
    scores.resize(pages);
    for (int i = 0; i < n_q; ++i) {
      cpu::QuestScores(qs[i], h.page_min.data(), h.page_max.data(), pages,
                       ctx.head_dim, scores.data());
      for (int64_t p = 0; p < pages; ++p) sum[p] += scores[p];
    }
    for (int64_t p = 0; p < pages; ++p) {
      order.push_back({sum[p], static_cast<int32_t>(s),
                       static_cast<int32_t>(p)});
    }
  }
  const size_t n_pages = std::min<size_t>(
      order.size(),
      (config.budget + config.quest_page_size - 1) / config.quest_page_size);
  std::partial_sort(order.begin(), order.begin() + n_pages, order.end(),
                    ScoreBefore);
  for (size_t i = 0; i < n_pages; ++i) {
    const Scored& o = order[i];
    const int32_t size = BlockSize(*segs[o.segment], ctx.layer, ctx.kv_head,
                                   BlockKind::kPage, o.id,
                                   config.quest_page_size);
    out->blocks.push_back({o.segment, BlockKind::kPage, o.id, 0, size});
    out->tokens += size;
  }
}

void PlanStreaming(const KvStoreConfig& config, const PlanContext& ctx,
                   HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  AddRecentRows(ctx, std::min<int64_t>(config.budget, ClusteredTokens(ctx)),
                config.quest_page_size, out);
}

}  // namespace ckv
