// The decoder forward pass on the CPU, for every architecture of the arch
// table (model/arch/arch.h): its flags select the optional steps. One call
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
#include "absl/types/span.h"
#include "kernels/cpu/thread_pool.h"
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
inline SequenceInput MakeInput(absl::Span<const int32_t> tokens,
                               KvCache* cache, LogitsMode logits,
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
  int threads = 1;
  int prefill_chunk = 256;  // max tokens per forward step
  bool profile = false;     // accumulate ForwardProfile (benchmarks)
  // Positions a sequence may reach (0: the model's context_length). With
  // LongRoPE the long factors apply when this exceeds the original context.
  int64_t context_per_sequence = 0;
};

// Cumulative wall time of Forward calls, when TransformerOptions::profile is
// on: `attention` is the per-sequence part of the attention blocks (KV
// append, Select, attention over the selected rows), `select` the Select
// calls inside it; `total` covers whole forward steps (all layers, logits).
struct ForwardProfile {
  int64_t steps = 0;
  int64_t total_ns = 0;
  int64_t attention_ns = 0;
  int64_t select_ns = 0;
};

struct StepPart;  // rows of one sequence inside a forward step

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ModelWeights& weights,
              const TransformerOptions& options);
  ~Transformer();

  // Evaluates all sequences. Validates token ids (INVALID_ARGUMENT) and
  // reserves cache space (RESOURCE_EXHAUSTED) for every sequence before any
  // work starts; on error no cache is modified.
  absl::Status Forward(absl::Span<SequenceInput> batch);

  const ModelConfig& config() const { return config_; }
  kernels::cpu::ThreadPool* pool() { return pool_.get(); }
  const ForwardProfile& profile() const { return profile_; }
  void ResetProfile() { profile_ = ForwardProfile{}; }

 private:
  struct Step;      // one chunk of rows from several sequences
  struct Buffers;   // activation scratch, reused between calls

  absl::Status Validate(absl::Span<SequenceInput> batch) const;
  void RunStep(const Step& step);
  void Embed(const Step& step);
  void AttentionBlock(int layer, const Step& step);
  void MlpBlock(int layer, const Step& step);
  void OutputLogits(const Step& step);
  void AttendPart(int layer, const StepPart& p);
  void ProjectQkv(int layer, int64_t rows);
  kernels::cpu::RopeParams LayerRope(int layer) const;

  const ModelConfig config_;
  const ModelWeights& weights_;
  TransformerOptions options_;
  std::unique_ptr<kernels::cpu::ThreadPool> pool_;
  std::unique_ptr<Buffers> buf_;
  ForwardProfile profile_;
};

}  // namespace ckv
