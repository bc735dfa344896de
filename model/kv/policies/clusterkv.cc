// clusterkv: clusters by descending q . centroid (exact order; ties by
// segment then cluster index), whole clusters until B, the last trimmed to
// its first rows in position order; the `recent_tokens` most recent rows
// first. per_kv_head scores with the sum of the group's queries.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "model/kv/policies/policy.h"

namespace ckv {
namespace {

class ClusterKvPolicy final : public SelectionPolicy {
 public:
  explicit ClusterKvPolicy(const KvStoreConfig& c) : config_(c) {}

  const char* name() const override { return "clusterkv"; }
  IndexSet indexes() const override { return kClusterIndex; }
  void Plan(const PlanContext& ctx, const float* const* qs, int n_q,
            HeadPlan* out) override {
    if (n_q == 1) {
      PlanQuery(ctx, qs[0], out);
      return;
    }
    q_sum_.assign(ctx.head_dim, 0.0f);
    for (int i = 0; i < n_q; ++i) {
      for (int d = 0; d < ctx.head_dim; ++d) q_sum_[d] += qs[i][d];
    }
    PlanQuery(ctx, q_sum_.data(), out);
  }

 private:
  void PlanQuery(const PlanContext& ctx, const float* q, HeadPlan* out);

  KvStoreConfig config_;
  std::vector<float> q_sum_, scores_;
  std::vector<ScoredBlock> order_;
};

void ClusterKvPolicy::PlanQuery(const PlanContext& ctx, const float* q,
                                HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  const auto& segs = *ctx.segments;
  const int64_t clustered = ClusteredTokens(ctx);
  const int64_t budget = std::min<int64_t>(config_.budget, clustered);
  const std::vector<int64_t> recent_begin =
      AddRecentRows(ctx, std::min<int64_t>(config_.recent_tokens, budget),
                    config_.quest_page_size, out);
  order_.clear();
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    scores_.resize(h.k);
    kernels::cpu::CentroidScores(q, h.centroids.data(), h.k, ctx.head_dim,
                                 scores_.data());
    for (int c = 0; c < h.k; ++c) {
      order_.push_back({scores_[c], static_cast<int32_t>(s), c});
    }
  }
  // Only the best clusters are consumed: sort a prefix expected to cover
  // the budget (twice the mean cluster size's worth), the rest only if the
  // prefix falls short. Same order as a full sort (ScoreBefore is total).
  const int64_t n = static_cast<int64_t>(order_.size());
  const int64_t mean_size =
      std::max<int64_t>(1, clustered / std::max<int64_t>(1, n));
  const int64_t prefix = std::min(n, 2 * (budget / mean_size) + 8);
  SortBestBlocks(&order_, prefix);
  for (int64_t i = 0; i < n && out->tokens < budget; ++i) {
    if (i == prefix) {
      std::sort(order_.begin() + prefix, order_.end(),
                [](const ScoredBlock& a, const ScoredBlock& b) {
                  return ScoreBefore(a, b);
                });
    }
    const ScoredBlock& o = order_[i];
    const HeadIndex& h = segs[o.segment]->layer(ctx.layer).heads[ctx.kv_head];
    const int32_t* first = h.members.data() + h.offsets[o.id];
    const int32_t* last = h.members.data() + h.offsets[o.id + 1];
    // Members ascend, so the rows before the recent range form a prefix
    // (all of them when the segment has no recent rows).
    const int64_t available =
        recent_begin[o.segment] >= segs[o.segment]->size()
            ? last - first
            : std::lower_bound(first, last, recent_begin[o.segment]) - first;
    const int64_t take = std::min(available, budget - out->tokens);
    if (take <= 0) continue;
    out->blocks.push_back(
        {o.segment, BlockKind::kCluster, o.id, 0, static_cast<int32_t>(take)});
    out->tokens += take;
  }
}

}  // namespace

std::unique_ptr<SelectionPolicy> MakeClusterKvPolicy(const KvStoreConfig& c) {
  return std::make_unique<ClusterKvPolicy>(c);
}

}  // namespace ckv
