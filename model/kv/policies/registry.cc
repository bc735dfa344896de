#include "model/kv/policies/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckv {

using PolicyFactory =
    std::unique_ptr<SelectionPolicy> (*)(const KvStoreConfig& config);

// One line per policy: X(stable id, factory defined in the policy's file).
// Never reuse or renumber an id: snapshot files store it.
#define CKV_SELECTION_POLICIES(X)              \
  X(KvPolicy::kFull, MakeFullPolicy)           \
  X(KvPolicy::kClusterKv, MakeClusterKvPolicy) \
  X(KvPolicy::kQuest, MakeQuestPolicy)         \
  X(KvPolicy::kStreaming, MakeStreamingPolicy) \
  X(KvPolicy{4}, MakeOraclePolicy)             \
  X(KvPolicy{5}, MakeClusterKvRerankPolicy)    \
  /* add new policies above this line */

#define CKV_DECLARE_FACTORY(id, factory) \
  std::unique_ptr<SelectionPolicy> factory(const KvStoreConfig& config);
CKV_SELECTION_POLICIES(CKV_DECLARE_FACTORY)
#undef CKV_DECLARE_FACTORY

namespace {

struct Entry {
  PolicyInfo info;
  PolicyFactory make;
};

std::vector<Entry> BuildEntries() {
  std::vector<Entry> entries;
#define CKV_ADD_ENTRY(id, factory) entries.push_back({{id, ""}, &factory});
  CKV_SELECTION_POLICIES(CKV_ADD_ENTRY)
#undef CKV_ADD_ENTRY
  for (Entry& e : entries) {
    KvStoreConfig c;
    c.policy = e.info.id;
    const auto policy = e.make(c);
    e.info.name = policy->name();
    e.info.selects = policy->selects();
    e.info.evaluation_only = policy->evaluation_only();
    e.info.indexes = policy->indexes();
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.info.id < b.info.id;
  });
  return entries;
}

const std::vector<Entry>& Entries() {
  static const std::vector<Entry>* entries =
      new std::vector<Entry>(BuildEntries());
  return *entries;
}

const Entry* FindEntry(KvPolicy id) {
  for (const Entry& e : Entries()) {
    if (e.info.id == id) return &e;
  }
  return nullptr;
}

}  // namespace

const std::vector<PolicyInfo>& RegisteredPolicies() {
  static const std::vector<PolicyInfo>* infos = [] {
    auto* v = new std::vector<PolicyInfo>;
    for (const Entry& e : Entries()) v->push_back(e.info);
    return v;
  }();
  return *infos;
}

const PolicyInfo* FindPolicy(KvPolicy id) {
  const Entry* e = FindEntry(id);
  return e == nullptr ? nullptr : &e->info;
}

std::unique_ptr<SelectionPolicy> MakePolicy(const KvStoreConfig& config) {
  const Entry* e = FindEntry(config.policy);
  return e == nullptr ? nullptr : e->make(config);
}

IndexSet BuiltIndexes(const KvStoreConfig& config) {
  IndexSet built = 0;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (p.id == config.policy || config.build_all_indexes) built |= p.indexes;
  }
  return built;
}

std::string JoinPolicyNames(absl::string_view separator,
                            bool with_evaluation_only) {
  std::vector<absl::string_view> names;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (with_evaluation_only || !p.evaluation_only) names.push_back(p.name);
  }
  return absl::StrJoin(names, separator);
}

// ------------------------------------------- kv_config.h, answered here

bool IsRegisteredPolicy(KvPolicy p) { return FindEntry(p) != nullptr; }

const char* KvPolicyName(KvPolicy p) {
  const Entry* e = FindEntry(p);
  return e == nullptr ? "?" : e->info.name.c_str();
}

absl::StatusOr<KvPolicy> ParseKvPolicy(const std::string& name) {
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (name == p.name) return p.id;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", name, "' (",
                   JoinPolicyNames(", ", /*with_evaluation_only=*/true), ")"));
}

absl::StatusOr<KvPolicy> ParseServedKvPolicy(const std::string& name) {
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (name == p.name && !p.evaluation_only) return p.id;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", name, "' (a server serves ",
                   JoinPolicyNames(", ", /*with_evaluation_only=*/false), ")"));
}

}  // namespace ckv
