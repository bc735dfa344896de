// full: dense attention over every token; no index, no plan.
#include <memory>

#include "model/kv/policies/policy.h"

namespace ckv {
namespace {

class FullPolicy final : public SelectionPolicy {
 public:
  const char* name() const override { return "full"; }
  bool selects() const override { return false; }
  IndexSet indexes() const override { return 0; }
  void Plan(const PlanContext&, const float* const*, int,
            HeadPlan* out) override {
    *out = HeadPlan{};
  }
};

}  // namespace

std::unique_ptr<SelectionPolicy> MakeFullPolicy(const KvStoreConfig&) {
  return std::make_unique<FullPolicy>();
}

}  // namespace ckv
