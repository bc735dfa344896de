// Saved prefills of the engine workload (--engine_prefill_cache DIR), so
// that decode experiments at long contexts (a 128k prefill of the demo model
// takes ~30 minutes here) can be repeated in seconds. A saved prefill is a
// store snapshot (model/kv/snapshot.h: rows, clusters and Quest pages, so
// decoding a restored store is bit-identical) plus a JSON file of the
// measurements of the prefill that made it, reported again on reuse.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/kv/clustered_store.h"
#include "model/kv/snapshot.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace ckv::bench {

struct SavedPrefill {
  std::unique_ptr<ClusteredKvStore> store;
  nlohmann::json stats;  // what Save was given
};

class PrefillCache {
 public:
  // The cache folder `dir` for `model` (its fingerprint is read once, here).
  static absl::StatusOr<PrefillCache> Open(const std::string& dir,
                                           const Model& model);

  // Where the prefill of `context` random tokens (seed) into a store of
  // `config`, `prefill_chunk` tokens per forward step, is saved: the file
  // name carries the model's and the store layout's fingerprints, so another
  // model or layout never matches.
  std::string PathOf(const KvStoreConfig& config, int64_t context,
                     uint64_t seed, int prefill_chunk) const;
  // NOT_FOUND when nothing is saved at `path`; other errors for a file that
  // exists but cannot be used (it is not deleted).
  absl::StatusOr<SavedPrefill> Load(const std::string& path, int64_t max_tokens,
                                    ClusterWorker* worker) const;
  // Writes `store` (every index built) and `stats` next to it, atomically.
  absl::Status Save(const std::string& path, const ClusteredKvStore& store,
                    const nlohmann::json& stats) const;

 private:
  PrefillCache(std::string dir, SnapshotExpect expect)
      : dir_(std::move(dir)), expect_(std::move(expect)) {}

  std::string dir_;
  SnapshotExpect expect_;  // the model's; max_tokens set per Load
};

}  // namespace ckv::bench
