// clusterkv: clusters by descending q . centroid (exact order; ties by
// segment then cluster index), whole clusters until B, the last trimmed to
// its first rows in position order; the `recent_tokens` most recent rows
// first. per_kv_head scores with the sum of the group's queries.
// clusterkv_rerank: the same first stage, continued to kRerankFactor x B
// candidate tokens, which cluster_rerank.h reorders by the attention mass
// per row of their keys; whole clusters in that order until B, the last
// trimmed to its densest run of rows. per_kv_head: the first stage scores
// with the summed query, the second sums every query's mass.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kernels/cpu/cluster_ops.h"
#include "model/kv/policies/cluster_rerank.h"
#include "model/kv/policies/policy.h"
#include "model/kv/policies/score_order.h"

namespace ckv {
namespace {

// Candidate tokens of clusterkv_rerank's second stage, in budgets.
constexpr int64_t kRerankFactor = 4;

class ClusterKvPolicy final : public SelectionPolicy {
 public:
  ClusterKvPolicy(const KvStoreConfig& c, bool rerank)
      : config_(c), rerank_(rerank) {}

  const char* name() const override {
    return rerank_ ? "clusterkv_rerank" : "clusterkv";
  }
  IndexSet indexes() const override { return kClusterIndex; }
  void Plan(const PlanContext& ctx, const float* const* qs, int n_q,
            HeadPlan* out) override;
  void PlanEach(const PlanContext& ctx, const float* const* qs, int n_q,
                HeadPlan* out) override;

 private:
  // The plan of the query whose cluster scores are in order_; `query`: its
  // place in its KV group (0 for a shared plan), whose threshold hint it
  // uses; qs: the n_q queries the plan serves (the second stage's).
  void PlanFromScores(const PlanContext& ctx, int query, const float* const* qs,
                      int n_q, HeadPlan* out);
  // Calls visit(block, available rows) for the clusters in order_'s order
  // that have rows before the recent range, until it returns true or the
  // clusters run out; `want`: the tokens the caller expects to consume
  // (sizes the part of the order computed first); `clustered`:
  // ClusteredTokens(ctx).
  template <typename Visit>
  void Walk(const PlanContext& ctx, int query, int64_t clustered, int64_t want,
            Visit visit);
  // clusterkv_rerank's selection after the recent rows (out->tokens so far).
  void PlanRerank(const PlanContext& ctx, int query, const float* const* qs,
                  int n_q, int64_t clustered, int64_t budget, HeadPlan* out);
  // The ScoreOrder threshold that suited (layer, KV head, query) at its
  // last step: consecutive decode queries score alike, so it usually holds.
  float* Hint(const PlanContext& ctx, int query);
  // Scores every cluster of every segment for the n_q queries in one pass
  // over the centroids: group_scores_[i * total + seg_first_[s] + c] is
  // query i's score of cluster c of segment s (seg_first_[s]: the index of
  // segment s's first cluster in the concatenation of every segment's);
  // hands the segment list to order_ and returns `total`.
  int64_t ScoreGroup(const PlanContext& ctx, const float* const* qs, int n_q);
  KvStoreConfig config_;
  bool rerank_;
  ClusterRerank reranker_;
  std::vector<ClusterRerank::Candidate> candidates_;
  std::vector<float> q_sum_;
  std::vector<float> group_q_, group_scores_;
  std::vector<int64_t> seg_first_;
  std::vector<int64_t> recent_begin_;  // AddRecentRows scratch
  ScoreOrder order_;
  absl::flat_hash_map<int64_t, float> hints_;
};

int64_t ClusterKvPolicy::ScoreGroup(const PlanContext& ctx,
                                    const float* const* qs, int n_q) {
  const auto& segs = *ctx.segments;
  const int hd = ctx.head_dim;
  seg_first_.assign(segs.size() + 1, 0);
  for (size_t s = 0; s < segs.size(); ++s) {
    seg_first_[s + 1] =
        seg_first_[s] + segs[s]->layer(ctx.layer).heads[ctx.kv_head].k;
  }
  const int64_t total = seg_first_.back();
  group_q_.resize(size_t{1} * n_q * hd);
  for (int i = 0; i < n_q; ++i) {
    std::copy_n(qs[i], hd, group_q_.data() + size_t{1} * i * hd);
  }
  group_scores_.resize(size_t{1} * n_q * total);  // [n_q][total]
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    kernels::cpu::CentroidScoresMulti(
        group_q_.data(), n_q, h.centroid_panels.data(), h.k, hd,
        group_scores_.data() + seg_first_[s], total);
  }
  order_.SetSegments(seg_first_);
  return total;
}

void ClusterKvPolicy::Plan(const PlanContext& ctx, const float* const* qs,
                           int n_q, HeadPlan* out) {
  const float* q = qs[0];
  if (n_q > 1) {
    q_sum_.assign(ctx.head_dim, 0.0f);
    for (int i = 0; i < n_q; ++i) {
      for (int d = 0; d < ctx.head_dim; ++d) q_sum_[d] += qs[i][d];
    }
    q = q_sum_.data();
  }
  ScoreGroup(ctx, &q, 1);
  order_.Reset(group_scores_.data());
  PlanFromScores(ctx, 0, qs, n_q, out);
}

void ClusterKvPolicy::PlanEach(const PlanContext& ctx, const float* const* qs,
                               int n_q, HeadPlan* out) {
  const int64_t total = ScoreGroup(ctx, qs, n_q);
  for (int i = 0; i < n_q; ++i) {
    order_.Reset(group_scores_.data() + i * total);
    PlanFromScores(ctx, i, qs + i, 1, out + i);
  }
}

float* ClusterKvPolicy::Hint(const PlanContext& ctx, int query) {
  const int64_t key =
      (int64_t{ctx.layer} << 40) | (int64_t{ctx.kv_head} << 16) | query;
  return &hints_.try_emplace(key, NAN).first->second;
}

template <typename Visit>
void ClusterKvPolicy::Walk(const PlanContext& ctx, int query, int64_t clustered,
                           int64_t want, Visit visit) {
  const auto& segs = *ctx.segments;
  // Only the best clusters are consumed: order a head expected to cover
  // `want` (1.5 times the mean cluster size's worth, plus 4), the rest only
  // if the head falls short (for want = B it did not once in 14,016 plans
  // of the trained model at 8k/128k and the engine geometry at 32k). Same
  // order as a full sort (ScoreBefore is total).
  const int64_t n = order_.size();
  const int64_t mean_size =
      std::max<int64_t>(1, clustered / std::max<int64_t>(1, n));
  const std::vector<ScoredBlock>* order = &order_.Best(
      std::min(n, 3 * (want / mean_size) / 2 + 4), Hint(ctx, query));
  bool complete = static_cast<int64_t>(order->size()) == n;
  for (size_t i = 0;; ++i) {
    if (i == order->size()) {
      if (complete) return;
      order = &order_.All();  // its head is the order so far: i continues
      complete = true;
      if (i == order->size()) return;
    }
    const ScoredBlock& o = (*order)[i];
    const HeadIndex& h = segs[o.segment]->layer(ctx.layer).heads[ctx.kv_head];
    const int32_t* first = h.members.data() + h.offsets[o.id];
    const int32_t* last = h.members.data() + h.offsets[o.id + 1];
    // Members ascend, so the rows before the recent range form a prefix
    // (all of them when the segment has no recent rows).
    const int64_t available =
        recent_begin_[o.segment] >= segs[o.segment]->size()
            ? last - first
            : std::lower_bound(first, last, recent_begin_[o.segment]) - first;
    if (available > 0 && visit(o, available)) return;
  }
}

void ClusterKvPolicy::PlanFromScores(const PlanContext& ctx, int query,
                                     const float* const* qs, int n_q,
                                     HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  const int64_t clustered = ClusteredTokens(ctx);
  const int64_t budget = std::min<int64_t>(config_.budget, clustered);
  AddRecentRows(ctx, std::min<int64_t>(config_.recent_tokens, budget),
                config_.quest_page_size, out, &recent_begin_);
  if (out->tokens >= budget) return;
  if (rerank_) {
    PlanRerank(ctx, query, qs, n_q, clustered, budget, out);
    return;
  }
  Walk(ctx, query, clustered, budget,
       [&](const ScoredBlock& o, int64_t available) {
         const int64_t take = std::min(available, budget - out->tokens);
         out->blocks.push_back({o.segment, BlockKind::kCluster, o.id, 0,
                                static_cast<int32_t>(take)});
         out->tokens += take;
         return out->tokens >= budget;
       });
}

void ClusterKvPolicy::PlanRerank(const PlanContext& ctx, int query,
                                 const float* const* qs, int n_q,
                                 int64_t clustered, int64_t budget,
                                 HeadPlan* out) {
  const int64_t want = kRerankFactor * (budget - out->tokens);
  int64_t candidate_rows = 0;
  candidates_.clear();
  Walk(ctx, query, clustered, want,
       [&](const ScoredBlock& o, int64_t available) {
         candidates_.push_back(
             {o.segment, o.id, static_cast<int32_t>(available)});
         candidate_rows += available;
         return candidate_rows >= want;
       });
  const std::vector<int32_t>& order =
      reranker_.Rank(ctx, config_.kv_dtype, qs, n_q, candidates_);
  for (int32_t c : order) {
    if (out->tokens >= budget) break;
    const ClusterRerank::Candidate& cand = candidates_[c];
    const int32_t take = static_cast<int32_t>(
        std::min<int64_t>(cand.rows, budget - out->tokens));
    const int32_t begin = take < cand.rows ? reranker_.BestWindow(c, take) : 0;
    out->blocks.push_back(
        {cand.segment, BlockKind::kCluster, cand.id, begin, take});
    out->tokens += take;
  }
}

}  // namespace

std::unique_ptr<SelectionPolicy> MakeClusterKvPolicy(const KvStoreConfig& c) {
  return std::make_unique<ClusterKvPolicy>(c, /*rerank=*/false);
}

std::unique_ptr<SelectionPolicy> MakeClusterKvRerankPolicy(
    const KvStoreConfig& c) {
  return std::make_unique<ClusterKvPolicy>(c, /*rerank=*/true);
}

}  // namespace ckv
