// A loaded model: the mapped GGUF, its config, bound weights and tokenizer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/dense_kv_cache.h"
#include "model/gguf/gguf.h"
#include "model/kv/clustered_store.h"
#include "model/kv/snapshot.h"
#include "model/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace ckv {

struct Model {
  std::unique_ptr<gguf::GgufFile> file;
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Opens and validates a GGUF model (weights and tokenizer). `memory`:
// where the weights live (gguf/file_memory.h; auto: huge pages where that
// helps, else the mapped file).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(
    const std::string& path, gguf::FileMemory memory = gguf::FileMemory::kAuto);

// What a reader of `model`'s session snapshots requires: its fingerprint,
// KV shape and vocabulary, and the store token limit `max_tokens`
// (checksums verified). IO errors of the fingerprint name the model's path.
absl::StatusOr<SnapshotExpect> SnapshotExpectFor(const Model& model,
                                                 int64_t max_tokens);

// Options of a dense cache shaped for `config`.
DenseKvCacheOptions DenseCacheOptions(const ModelConfig& config,
                                      kernels::DType dtype, int64_t max_tokens);

// The KV cache a session of `config` uses: policy full -> a dense cache of
// `dense_type` (F32 allowed); otherwise the clustered store (its host tier
// is kv.kv_dtype), clustering on `worker` when given, made with `env` (the
// backend's store_env(): pinned rows, a device planner and k-means on a
// device backend; empty: the store's own host defaults).
std::unique_ptr<KvCache> NewKvCache(const ModelConfig& config,
                                    const KvStoreConfig& kv,
                                    kernels::DType dense_type,
                                    ClusterWorker* worker, StoreEnv env = {});
// The KV shape of `config`, with its sliding-window layers.
KvShape KvShapeOf(const ModelConfig& config);
// Per layer: the attention window (0 = unlimited).
std::vector<int32_t> LayerWindows(const ModelConfig& config);

}  // namespace ckv
