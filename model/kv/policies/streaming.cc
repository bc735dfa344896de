// streaming: the most recent B clustered rows (not recallable: what leaves
// the window is never attended again). Needs no index.
#include <algorithm>
#include <memory>
#include <vector>

#include "model/kv/policies/policy.h"

namespace ckv {
namespace {

class StreamingPolicy final : public SelectionPolicy {
 public:
  explicit StreamingPolicy(const KvStoreConfig& c) : config_(c) {}

  const char* name() const override { return "streaming"; }
  IndexSet indexes() const override { return 0; }
  bool reads_queries() const override { return false; }
  void Plan(const PlanContext& ctx, const float* const*, int,
            HeadPlan* out) override {
    out->blocks.clear();
    out->tokens = 0;
    AddRecentRows(ctx, std::min<int64_t>(config_.budget, ClusteredTokens(ctx)),
                  config_.quest_page_size, out, &recent_begin_);
  }

 private:
  KvStoreConfig config_;
  std::vector<int64_t> recent_begin_;  // AddRecentRows scratch
};

}  // namespace

std::unique_ptr<SelectionPolicy> MakeStreamingPolicy(const KvStoreConfig& c) {
  return std::make_unique<StreamingPolicy>(c);
}

}  // namespace ckv
