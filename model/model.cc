#include "model/model.h"

#include <utility>

namespace ckv {

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path,
                                                 gguf::FileMemory memory) {
  auto model = std::make_unique<Model>();
  auto file = gguf::GgufFile::Open(path, {}, memory);
  if (!file.ok()) return file.status();
  model->file = *std::move(file);
  auto config = ReadModelConfig(*model->file);
  if (!config.ok()) return config.status();
  model->config = *config;
  auto weights = LoadWeights(*model->file, model->config);
  if (!weights.ok()) return weights.status();
  model->weights = *std::move(weights);
  auto tokenizer = Tokenizer::FromGguf(*model->file);
  if (!tokenizer.ok()) return tokenizer.status();
  model->tokenizer = *std::move(tokenizer);
  if (model->tokenizer->vocab_size() != model->config.vocab_size) {
    return absl::InvalidArgumentError(
        "tokenizer vocabulary size differs from token_embd rows");
  }
  return model;
}

absl::StatusOr<SnapshotExpect> SnapshotExpectFor(const Model& model,
                                                 int64_t max_tokens) {
  auto fingerprint =
      ModelFingerprint(model.file->path(), model.file->tensors());
  if (!fingerprint.ok()) return fingerprint.status();
  SnapshotExpect e;
  e.model_fingerprint = *fingerprint;
  e.shape = KvShapeOf(model.config);
  e.vocab_size = model.config.vocab_size;
  e.max_tokens = max_tokens;
  return e;
}

DenseKvCacheOptions DenseCacheOptions(const ModelConfig& c,
                                      kernels::DType dtype,
                                      int64_t max_tokens) {
  DenseKvCacheOptions o;
  o.n_layers = c.n_layers;
  o.n_heads = c.n_heads;
  o.n_kv_heads = c.n_kv_heads;
  o.head_dim = c.head_dim;
  o.dtype = dtype;
  o.max_tokens = max_tokens;
  o.layer_window = LayerWindows(c);
  return o;
}

std::vector<int32_t> LayerWindows(const ModelConfig& c) {
  std::vector<int32_t> w(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) w[l] = c.LayerWindow(l);
  return w;
}

KvShape KvShapeOf(const ModelConfig& c) {
  return KvShape{c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                 LayerWindows(c)};
}

std::unique_ptr<KvCache> NewKvCache(const ModelConfig& config,
                                    const KvStoreConfig& kv,
                                    kernels::DType dense_type,
                                    ClusterWorker* worker, StoreEnv env) {
  if (kv.policy == KvPolicy::kFull) {
    return std::make_unique<DenseKvCache>(
        DenseCacheOptions(config, dense_type, kv.max_tokens));
  }
  return std::make_unique<ClusteredKvStore>(KvShapeOf(config), kv, worker,
                                            std::move(env));
}

}  // namespace ckv
