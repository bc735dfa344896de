// The decoder forward pass, for every architecture of the arch table
// (model/arch/arch.h): its flags select the optional steps, and a Backend
// (model/backend/backend.h) runs each op (the CPU backend by default). One call
// evaluates a batch of sequences, each a run of new tokens appended to its own
// KvCache: weight matmuls run once over all tokens of the batch, attention per
// sequence. Long inputs are processed in chunks of `prefill_chunk` tokens so
// that activation memory is bounded (attention is flash-style: no L x L
// matrix).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ckv {

enum class LogitsMode { kNone, kLast, kAll };

struct SequenceInput {
  absl::Span<const int32_t> tokens;  // appended at cache->num_tokens()
  KvCache* cache = nullptr;
  LogitsMode logits = LogitsMode::kLast;
  // Output: kLast -> 1 row, kAll -> tokens.size() rows of vocab_size floats.
  std::vector<float>* logits_out = nullptr;
  // kPrompt: a prefill call whose tokens form one segment; kGenerated:
  // decoded tokens or appended input, which join the tail.
  AppendKind kind = AppendKind::kPrompt;
  // The caller already called cache->Reserve for a larger input of which
  // these tokens are one chunk; Forward then does not Reserve.
  bool reserved = false;
};

// Builds a SequenceInput (aggregate order is easy to get wrong at call sites).
inline SequenceInput MakeInput(absl::Span<const int32_t> tokens, KvCache* cache,
                               LogitsMode logits,
                               std::vector<float>* logits_out,
                               AppendKind kind = AppendKind::kPrompt) {
  SequenceInput in;
  in.tokens = tokens;
  in.cache = cache;
  in.logits = logits;
  in.kind = kind;
  in.logits_out = logits_out;
  return in;
}

struct TransformerOptions {
  int threads = 1;  // the CPU backend's threads (the 3-argument constructor)
  int prefill_chunk = 256;  // max tokens per forward step
  bool profile = false;     // accumulate ForwardProfile (benchmarks)
  // Positions a sequence may reach (0: the model's context_length). With
  // LongRoPE the long factors apply when this exceeds the original context.
  int64_t context_per_sequence = 0;
};

struct StepPart;  // rows of one sequence inside a forward step

class Transformer {
 public:
  // Runs on a CpuBackend of options.threads threads.
  Transformer(const ModelConfig& config, const ModelWeights& weights,
              const TransformerOptions& options);
  // Runs on `backend` (not null), which it owns.
  Transformer(const ModelConfig& config, const ModelWeights& weights,
              const TransformerOptions& options,
              std::unique_ptr<Backend> backend);
  ~Transformer();

  // Evaluates all sequences. Validates token ids (INVALID_ARGUMENT) and
  // reserves cache space (RESOURCE_EXHAUSTED) for every sequence before any
  // work starts; on error no cache is modified. Afterwards, the backend's
  // status() (a device error: the caches then hold lost rows, the logits are
  // NaN; the batch's sessions should be dropped).
  absl::Status Forward(absl::Span<SequenceInput> batch);

  const ModelConfig& config() const { return config_; }
  const Backend& backend() const { return *backend_; }
  // The backend, e.g. for the store env of the caches it runs.
  Backend& backend() { return *backend_; }
  const ForwardProfile& profile() const { return profile_; }
  void ResetProfile() { profile_ = ForwardProfile{}; }

 private:
  struct Step;  // one chunk of rows from several sequences
  struct Acts;  // the backend's activation handles

  absl::Status Validate(absl::Span<SequenceInput> batch) const;
  void RunStep(const Step& step);
  void Embed(const Step& step);
  // A layer: PreAttention (norm, q/k/v, RoPE), Attend, PostAttention
  // (output projection, residual), MlpBlock.
  void PreAttention(int layer);
  void Attend(int layer);
  void PostAttention(int layer);
  void MlpBlock(int layer);
  void OutputLogits(const Step& step);
  void ProjectQkv(int layer);
  RopeSpec LayerRope(int layer) const;

  const ModelConfig config_;
  const ModelWeights& weights_;
  TransformerOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Acts> acts_;
  // Host scratch of a step, reused between calls.
  std::vector<int64_t> pos_;
  std::vector<int32_t> tokens_;
  std::vector<AttentionPart> attn_parts_;
  std::vector<int64_t> logit_rows_;
  std::vector<float> logits_;
  ForwardProfile profile_;
};

// A Transformer on a new backend of `kind` with options.threads threads;
// INVALID_ARGUMENT for a kind this build does not have (MakeBackend).
absl::StatusOr<std::unique_ptr<Transformer>> NewTransformer(
    const ModelConfig& config, const ModelWeights& weights,
    const TransformerOptions& options, BackendKind kind);

}  // namespace ckv
