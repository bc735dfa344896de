#include "model/kv/kv_config.h"

#include "absl/strings/str_cat.h"

namespace ckv {

absl::Status ValidateKvStoreConfig(const KvStoreConfig& c) {
  auto bad = [](absl::string_view field, absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", rule));
  };
  if (!IsRegisteredPolicy(c.policy)) {
    return bad("policy", "is not a registered selection policy");
  }
  if (c.budget < 1) return bad("budget", "must be >= 1");
  if (c.sink_tokens < 0) return bad("sink_tokens", "must be >= 0");
  if (c.tokens_per_cluster < 1) return bad("tokens_per_cluster", "must be >= 1");
  if (c.window < 1) return bad("window", "must be >= 1");
  if (c.kmeans_max_iters < 1) return bad("kmeans_max_iters", "must be >= 1");
  if (c.cache_steps < 0) return bad("cache_steps", "must be >= 0");
  if (c.recent_tokens < 0 || c.recent_tokens > c.budget) {
    return bad("recent_tokens", "must be in [0, budget]");
  }
  if (c.dense_layers < 0) return bad("dense_layers", "must be >= 0");
  if (c.quest_page_size < 1) return bad("quest_page_size", "must be >= 1");
  if (c.kv_dtype != kernels::DType::kF16 &&
      c.kv_dtype != kernels::DType::kBF16) {
    return bad("kv_dtype", "must be f16 or bf16 (the host tier)");
  }
  if (c.max_tokens < 1) return bad("max_tokens", "must be >= 1");
  return absl::OkStatus();
}

const char* GqaSelectionName(GqaSelection g) {
  return g == GqaSelection::kPerQueryHead ? "per_query_head" : "per_kv_head";
}

absl::StatusOr<GqaSelection> ParseGqaSelection(const std::string& name) {
  if (name == "per_query_head") return GqaSelection::kPerQueryHead;
  if (name == "per_kv_head") return GqaSelection::kPerKvHead;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown gqa_selection '", name, "' (per_query_head, per_kv_head)"));
}

absl::StatusOr<CacheMode> ParseCacheMode(const std::string& name) {
  if (name == "zero_copy") return CacheMode::kZeroCopy;
  if (name == "copy") return CacheMode::kCopy;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cache mode '", name, "' (zero_copy, copy)"));
}

absl::StatusOr<kernels::cpu::ClusterMetric> ParseClusterMetric(
    const std::string& name) {
  using kernels::cpu::ClusterMetric;
  if (name == "cosine") return ClusterMetric::kCosine;
  if (name == "l2") return ClusterMetric::kL2;
  if (name == "ip" || name == "inner_product") {
    return ClusterMetric::kInnerProduct;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cluster metric '", name, "' (cosine, l2, ip)"));
}

}  // namespace ckv
