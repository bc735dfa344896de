// The registry of selection policies: id <-> name <-> factory. Ids are
// stable (snapshots and store fingerprints store them), names are what
// flags, the wire and reports use. KvPolicyName, ParseKvPolicy and
// ValidateKvStoreConfig (kv_config.h) answer from here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/kv/policies/policy.h"

namespace ckv {

struct PolicyInfo {
  KvPolicy id;
  std::string name;
  bool selects = true;
  bool evaluation_only = false;
  IndexSet indexes = 0;
};

// Every registered policy, by ascending id.
const std::vector<PolicyInfo>& RegisteredPolicies();
// Null when `id` is not registered.
const PolicyInfo* FindPolicy(KvPolicy id);
// The registered names by ascending id, joined by `separator`, for help texts
// and messages: the policies a server may serve, and with
// `with_evaluation_only` also those for evaluation only (oracle).
std::string JoinPolicyNames(absl::string_view separator,
                            bool with_evaluation_only);

// The policy of config.policy, configured by `config` (budget, page size,
// recent_tokens, ...). Callers validate the config first
// (ValidateKvStoreConfig refuses an unregistered id); for an unregistered id
// this returns null.
std::unique_ptr<SelectionPolicy> MakePolicy(const KvStoreConfig& config);

// The indexes a store with `config` builds for its sparse layers: its
// policy's, or with build_all_indexes those of every registered policy (so
// that forks may switch to any of them).
IndexSet BuiltIndexes(const KvStoreConfig& config);

}  // namespace ckv
