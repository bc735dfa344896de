// Typed configuration of the clustered KV store and its selection policies,
// with their defaults in one place (semantics: docs/clusterkv.md).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/settings_schema.h"
#include "kernels/dtype.h"

namespace ckv {

// The id of a selection policy. Every policy is registered in
// model/kv/policies/registry.cc (the valid ids, with names and factories);
// ids are stable: snapshots store them. The built-ins that code names
// directly have constants here; others (e.g. `oracle`, 4) are reached by
// name (ParseKvPolicy).
enum class KvPolicy : int32_t {
  kFull = 0,       // dense attention over every token
  kClusterKv = 1,  // k-means clusters scored by q . centroid, best until B
  kQuest = 2,      // pages of 16 scored by per-channel min/max upper bound
  kStreaming = 3,  // the most recent `budget` clustered tokens
};

// Names: settings::kGqaSelectionNames, by value.
enum class GqaSelection {
  kPerQueryHead,  // each query head selects from its KV head's clusters
  kPerKvHead,     // scores summed over the group: one shared selection
};

// How a decode step reaches the K,V of the blocks it selected. Both modes
// keep the same cluster-granular cache accounting (hits, misses, bytes).
// Names: settings::kCacheModeNames, by value.
enum class CacheMode {
  kZeroCopy,  // read in place from the host tier (CPU: no copy at all)
  kCopy,      // copy missing blocks into the cache arena (the copy engine)
};

// The distance k-means clusters keys by (the model's own enum; the CPU
// index builder maps it to ClusterMetric). Names:
// settings::kClusterMetricNames, by value; the values are stored in
// snapshots, so their order is fixed.
enum class ClusterMetric {
  kCosine,        // argmax <k,mu>/(|k||mu|)   (ClusterKV)
  kL2,            // argmin |k - mu|^2         (ablation)
  kInnerProduct,  // argmax <k,mu>             (ablation)
};

// The defaults of the KV settings. Each field's name, range, help and fork
// rule are in common/settings_schema.h (CKV_KV_*): a new field needs an
// entry there, which brings it into validation, flags, the wire (for
// CKV_KV_WIRE_*) and snapshots.
struct KvStoreConfig {
  KvPolicy policy = KvPolicy::kClusterKv;
  int budget = 1024;            // B: selected clustered tokens per head
  int sink_tokens = 16;         // first tokens, always attended
  int tokens_per_cluster = 80;  // k = max(1, ceil(n / tokens_per_cluster))
  int window = 320;             // tail closes as a segment at this length
  int kmeans_max_iters = 20;
  int cache_steps = 1;  // R: keep blocks selected in the last R steps
  CacheMode cache_mode = CacheMode::kZeroCopy;
  GqaSelection gqa_selection = GqaSelection::kPerQueryHead;
  int recent_tokens = 0;  // most recent clustered tokens always chosen
  uint64_t seed = 0;      // k-means initialisation
  int dense_layers = 2;   // layers below this attend densely
  int quest_page_size = 16;
  kernels::DType kv_dtype = kernels::DType::kF16;  // host tier: F16 or BF16
  ClusterMetric metric = ClusterMetric::kCosine;
  bool async_clustering = true;  // cluster on a worker, overlapping compute
  // Build both the k-means and the Quest index whatever the policy, so that
  // forks may switch policy (benchmarks and quality comparisons).
  bool build_all_indexes = false;
  int64_t max_tokens = 1 << 20;  // Reserve beyond this fails
};

// The ranges of common/settings_schema.h (recent_tokens at most budget,
// dense_layers at most `model_layers`): INVALID_ARGUMENT naming the field as
// on the wire ("kv.budget"), its range and the value.
absl::Status ValidateKvStoreConfig(
    const KvStoreConfig& c, int model_layers = std::numeric_limits<int>::max());
// The range check of one KV setting: INVALID_ARGUMENT "kv.NAME must be ...,
// got VALUE" when `value` is outside `range`.
absl::Status CheckKvRange(absl::string_view name, double value,
                          const settings::Range& range, bool integral);

// From the policy registry (model/kv/policies/registry.h): whether `p` is
// a registered id; its name ("?" when not registered); the id of a name
// (INVALID_ARGUMENT listing the registered names).
bool IsRegisteredPolicy(KvPolicy p);
const char* KvPolicyName(KvPolicy p);
absl::StatusOr<KvPolicy> ParseKvPolicy(const std::string& name);
// ParseKvPolicy for serving: evaluation-only policies (oracle) are refused
// too, with the served names listed.
absl::StatusOr<KvPolicy> ParseServedKvPolicy(const std::string& name);
const char* GqaSelectionName(GqaSelection g);
absl::StatusOr<GqaSelection> ParseGqaSelection(const std::string& name);
const char* CacheModeName(CacheMode m);
absl::StatusOr<CacheMode> ParseCacheMode(const std::string& name);
const char* ClusterMetricName(ClusterMetric m);
// cosine, l2, ip (or inner_product).
absl::StatusOr<ClusterMetric> ParseClusterMetric(const std::string& name);

// The named KV settings (CKV_KV_WIRE_NAMES, CKV_KV_ENGINE_NAMES) by type,
// for code expanding the schema's lists: the value's name, and the value of
// a name (INVALID_ARGUMENT listing the accepted names).
inline const char* SettingValueName(KvPolicy v) { return KvPolicyName(v); }
inline const char* SettingValueName(GqaSelection v) {
  return GqaSelectionName(v);
}
inline const char* SettingValueName(CacheMode v) { return CacheModeName(v); }
inline const char* SettingValueName(ClusterMetric v) {
  return ClusterMetricName(v);
}
inline const char* SettingValueName(kernels::DType v) {
  return kernels::DTypeName(v);
}
absl::Status ParseSettingValue(const std::string& name, KvPolicy* out);
absl::Status ParseSettingValue(const std::string& name, GqaSelection* out);
absl::Status ParseSettingValue(const std::string& name, CacheMode* out);
absl::Status ParseSettingValue(const std::string& name, ClusterMetric* out);
absl::Status ParseSettingValue(const std::string& name, kernels::DType* out);

}  // namespace ckv
