// quest: the clustered rows cut in position order into pages (per segment;
// a segment's last page may be shorter) with per-channel min/max keys; the
// top ceil(B / page) pages by sum_c max(q_c max_c, q_c min_c), summed over
// the n_q queries (one head, or the group for per_kv_head).
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "model/kv/policies/policy.h"

namespace ckv {
namespace {

class QuestPolicy final : public SelectionPolicy {
 public:
  explicit QuestPolicy(const KvStoreConfig& c) : config_(c) {}

  const char* name() const override { return "quest"; }
  IndexSet indexes() const override { return kPageIndex; }
  void Plan(const PlanContext& ctx, const float* const* qs, int n_q,
            HeadPlan* out) override;

 private:
  KvStoreConfig config_;
  std::vector<float> scores_, sum_;
  std::vector<ScoredBlock> order_;
};

void QuestPolicy::Plan(const PlanContext& ctx, const float* const* qs, int n_q,
                       HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  const auto& segs = *ctx.segments;
  order_.clear();
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(ctx.layer).heads[ctx.kv_head];
    const int64_t pages = h.page_min.size() / ctx.head_dim;
    sum_.assign(pages, 0.0f);
    scores_.resize(pages);
    for (int i = 0; i < n_q; ++i) {
      kernels::cpu::QuestScores(qs[i], h.page_min.data(), h.page_max.data(),
                                pages, ctx.head_dim, scores_.data());
      for (int64_t p = 0; p < pages; ++p) sum_[p] += scores_[p];
    }
    for (int64_t p = 0; p < pages; ++p) {
      order_.push_back(
          {sum_[p], static_cast<int32_t>(s), static_cast<int32_t>(p)});
    }
  }
  const int page_size = config_.quest_page_size;
  const size_t n_pages = std::min<size_t>(
      order_.size(), (int64_t{config_.budget} + page_size - 1) / page_size);
  SortBestBlocks(&order_, n_pages);
  for (size_t i = 0; i < n_pages; ++i) {
    const ScoredBlock& o = order_[i];
    const int32_t size = BlockSize(*segs[o.segment], ctx.layer, ctx.kv_head,
                                   BlockKind::kPage, o.id, page_size);
    out->blocks.push_back({o.segment, BlockKind::kPage, o.id, 0, size});
    out->tokens += size;
  }
}

}  // namespace

std::unique_ptr<SelectionPolicy> MakeQuestPolicy(const KvStoreConfig& c) {
  return std::make_unique<QuestPolicy>(c);
}

}  // namespace ckv
