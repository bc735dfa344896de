// oracle: the exact top-B clustered rows by q . k at every step, ties toward
// the earlier position (the truth of the top-k recall measure, quality.h):
// the upper bound any selection can reach, for evaluation. It reads every
// clustered key of the head at every step, so it needs no index and is as
// slow as dense attention. per_kv_head ranks by the sum over the group's
// queries. The plan is made of row ranges of pages (BlockKind::kPage), so
// the block cache holds whole pages around the chosen rows.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/kv/policies/policy.h"
#include "model/kv/quality.h"

namespace ckv {
namespace {

class OraclePolicy final : public SelectionPolicy {
 public:
  explicit OraclePolicy(const KvStoreConfig& c) : config_(c) {}

  const char* name() const override { return "oracle"; }
  bool evaluation_only() const override { return true; }
  IndexSet indexes() const override { return 0; }
  void Plan(const PlanContext& ctx, const float* const* qs, int n_q,
            HeadPlan* out) override;

 private:
  void LoadKeys(const PlanContext& ctx);
  void AddRow(int32_t segment, int32_t row, HeadPlan* out) const;

  KvStoreConfig config_;
  // Keys of the clustered rows of one (layer, KV head) as float, in
  // position order, and what they were read from: the heads of a GQA group
  // plan one after another over the same immutable segments.
  std::vector<float> keys_;
  std::vector<int64_t> loaded_uids_;
  int loaded_layer_ = -1, loaded_kv_head_ = -1;
  std::vector<double> scores_;
};

void OraclePolicy::LoadKeys(const PlanContext& ctx) {
  std::vector<int64_t> uids;
  for (const Segment* s : *ctx.segments) uids.push_back(s->uid());
  if (ctx.layer == loaded_layer_ && ctx.kv_head == loaded_kv_head_ &&
      uids == loaded_uids_) {
    return;
  }
  const int hd = ctx.head_dim;
  keys_.resize(size_t{1} * ClusteredTokens(ctx) * hd);
  float* dst = keys_.data();
  for (const Segment* s : *ctx.segments) {
    const uint16_t* k = s->keys(ctx.layer, ctx.kv_head);
    for (int32_t r = 0; r < s->size(); ++r, dst += hd) {
      const int64_t stored = s->StoredRow(ctx.layer, ctx.kv_head, r);
      kernels::ref::DequantizeRow(config_.kv_dtype, k + stored * hd, hd,
                                       dst);
    }
  }
  loaded_uids_ = std::move(uids);
  loaded_layer_ = ctx.layer;
  loaded_kv_head_ = ctx.kv_head;
}

// Appends segment row `row` as a one-row range of its page, extending the
// last block when the row follows it in the same page.
void OraclePolicy::AddRow(int32_t segment, int32_t row, HeadPlan* out) const {
  const int32_t page = row / config_.quest_page_size;
  const int32_t begin = row - page * config_.quest_page_size;
  ++out->tokens;
  if (!out->blocks.empty()) {
    BlockRef& last = out->blocks.back();
    if (last.segment == segment && last.id == page &&
        last.begin + last.count == begin) {
      ++last.count;
      return;
    }
  }
  out->blocks.push_back({segment, BlockKind::kPage, page, begin, 1});
}

void OraclePolicy::Plan(const PlanContext& ctx, const float* const* qs, int n_q,
                        HeadPlan* out) {
  out->blocks.clear();
  out->tokens = 0;
  LoadKeys(ctx);
  const int hd = ctx.head_dim;
  const int64_t n = ClusteredTokens(ctx);
  // As quality.cc scores: float products accumulated in double.
  scores_.assign(n, 0.0);
  for (int i = 0; i < n_q; ++i) {
    for (int64_t p = 0; p < n; ++p) {
      const float* k = &keys_[size_t{1} * p * hd];
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double{qs[i][d]} * k[d];
      scores_[p] += acc;
    }
  }
  // Ascending positions, so blocks come out in segment and row order.
  const std::vector<int64_t> top = TopKIndices(scores_, config_.budget);
  int32_t segment = 0;
  int64_t segment_first = 0;  // index of the segment's first row in scores_
  for (int64_t t : top) {
    while (t >= segment_first + (*ctx.segments)[segment]->size()) {
      segment_first += (*ctx.segments)[segment]->size();
      ++segment;
    }
    AddRow(segment, static_cast<int32_t>(t - segment_first), out);
  }
}

}  // namespace

std::unique_ptr<SelectionPolicy> MakeOraclePolicy(const KvStoreConfig& c) {
  return std::make_unique<OraclePolicy>(c);
}

}  // namespace ckv
