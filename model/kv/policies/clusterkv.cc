// clusterkv: clusters by descending q . centroid (exact order; ties by
// segment then cluster index), whole clusters until B, the last trimmed to
// its first rows in position order; the `recent_tokens` most recent rows
// first. per_kv_head scores with the sum of the group's queries.
#include <algorithm>
#include <cmath>
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
  // Scores every cluster of every segment into scores_ (segment s's
  // clusters from seg_first_[s]).
  void ScoreClusters(const PlanContext& ctx, const float* q);
  // order_ = every cluster whose score is >= a threshold t that at least
  // `prefix` clusters reach, in ScoreBefore order: exactly the head of the
  // full order. t comes from bisecting on counts (plain compare loops, cheap
  // next to ordering), aiming at no more than 2 * prefix clusters.
  void OrderBest(int64_t prefix);
  int64_t CountAtLeast(float t) const;
  // order_ = the clusters scoring >= t in ScoreBefore order (t = -inf:
  // every cluster, when the best fall short of the budget).
  void OrderAtLeast(float t);

  KvStoreConfig config_;
  std::vector<float> q_sum_, scores_;
  std::vector<int64_t> seg_first_;
  std::vector<ScoredBlock> order_;
};

void ClusterKvPolicy::ScoreClusters(const PlanContext& ctx, const float* q) {
  const auto& segs = *ctx.segments;
  seg_first_.assign(segs.size() + 1, 0);
  for (size_t s = 0; s < segs.size(); ++s) {
    seg_first_[s + 1] =
        seg_first_[s] + segs[s]->layer(ctx.layer).heads[ctx.kv_head].k;
  }
  scores_.resize(seg_first_.back());
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    kernels::cpu::CentroidScores(q, h.centroids.data(), h.k, ctx.head_dim,
                                 scores_.data() + seg_first_[s]);
  }
  // A NaN score (non-finite activations) ranks last: the orderings below
  // need a strict weak order.
  for (float& x : scores_) {
    if (std::isnan(x)) x = -INFINITY;
  }
}

int64_t ClusterKvPolicy::CountAtLeast(float t) const {
  int64_t n = 0;
  for (const float x : scores_) n += x >= t;
  return n;
}

void ClusterKvPolicy::OrderBest(int64_t prefix) {
  const int64_t n = static_cast<int64_t>(scores_.size());
  float lo = INFINITY, hi = -INFINITY;  // over the finite scores
  for (const float x : scores_) {
    if (x == -INFINITY) continue;  // NaN became -inf (ScoreClusters)
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  // Invariant: CountAtLeast(lo) >= prefix (else take every cluster).
  if (prefix >= n || !(lo <= hi) || CountAtLeast(lo) < prefix) {
    lo = -INFINITY;
  } else {
    for (int it = 0; it < 32 && lo < hi; ++it) {
      const float mid = lo + (hi - lo) / 2;
      if (mid <= lo || mid >= hi) break;
      const int64_t count = CountAtLeast(mid);
      if (count < prefix) {
        hi = mid;
        continue;
      }
      lo = mid;
      if (count <= 2 * prefix) break;
    }
  }
  OrderAtLeast(lo);
}

void ClusterKvPolicy::OrderAtLeast(float t) {
  order_.clear();
  for (size_t s = 0; s + 1 < seg_first_.size(); ++s) {
    for (int64_t c = seg_first_[s]; c < seg_first_[s + 1]; ++c) {
      if (scores_[c] >= t) {
        order_.push_back({scores_[c], static_cast<int32_t>(s),
                          static_cast<int32_t>(c - seg_first_[s])});
      }
    }
  }
  std::sort(order_.begin(), order_.end(), kScoreBefore);
}

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
  ScoreClusters(ctx, q);
  // Only the best clusters are consumed: order a head expected to cover the
  // budget (twice the mean cluster size's worth), the rest only if the head
  // falls short. Same order as a full sort (ScoreBefore is total).
  const int64_t n = static_cast<int64_t>(scores_.size());
  const int64_t mean_size =
      std::max<int64_t>(1, clustered / std::max<int64_t>(1, n));
  OrderBest(std::min(n, 2 * (budget / mean_size) + 8));
  bool complete = static_cast<int64_t>(order_.size()) == n;
  for (size_t i = 0; out->tokens < budget; ++i) {
    if (i == order_.size()) {
      if (complete) break;
      OrderAtLeast(-INFINITY);  // its head is the order so far: i continues
      complete = true;
      if (i == order_.size()) break;
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
