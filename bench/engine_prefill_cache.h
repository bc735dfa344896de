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
#include "bench/cluster_report.h"
#include "model/kv/clustered_store.h"
#include "model/model.h"

namespace ckv::bench {

struct SavedPrefill {
  std::unique_ptr<ClusteredKvStore> store;
  Json stats;  // what SavePrefill was given
};

// Where the prefill of `context` random tokens (seed) into a store of
// `config` for `model`, `prefill_chunk` tokens per forward step, is saved
// under `dir`: the file name carries the model's and the store layout's
// fingerprints, so another model or layout never matches.
absl::StatusOr<std::string> SavedPrefillPath(const std::string& dir,
                                             const Model& model,
                                             const KvStoreConfig& config,
                                             int64_t context, uint64_t seed,
                                             int prefill_chunk);

// NOT_FOUND when nothing is saved at `path`; other errors for a file that
// exists but cannot be used (it is not deleted).
absl::StatusOr<SavedPrefill> LoadPrefill(const std::string& path,
                                         const Model& model, int64_t max_tokens,
                                         ClusterWorker* worker);

// Writes `store` (every index built) and `stats` next to it, atomically.
absl::Status SavePrefill(const std::string& path, const Model& model,
                         const ClusteredKvStore& store, const Json& stats);

}  // namespace ckv::bench
