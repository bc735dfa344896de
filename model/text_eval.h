// Teacher-forced evaluation of KV selection policies on real text against
// dense attention (docs/clusterkv.md, "Quality on text").
//
// The text is cut into `windows` consecutive windows of prompt_tokens +
// decode_tokens tokens. In each window the prompt is prefilled once into a
// clustered store that builds every index (`base`, build_all_indexes) and
// once into a dense cache; every configuration then decodes the window's
// next decode_tokens tokens of the text, one token per step, from its own
// fork of the store, while the dense cache decodes the same tokens, all in
// one batch per step. Per configuration and step (the logits after feeding
// token t predict token t + 1 of the text):
//   - negative log-likelihood of the next token under the sparse and the
//     dense logits (perplexity = exp(mean NLL));
//   - KL(dense ‖ sparse) and whether the argmaxes agree;
//   - every recall_every steps, the mean top-k and attention-mass recall of
//     the sparse layers (model/kv/quality.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/kv/kv_config.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace ckv {

struct TextEvalOptions {
  int64_t prompt_tokens = 6144;
  int64_t decode_tokens = 2048;
  int windows = 8;
  int recall_every = 8;  // steps between recall measurements (>= 1)
};

// Sums over every scored step; the accessors turn them into means.
struct TextEvalResult {
  KvStoreConfig kv;
  int64_t steps = 0;
  int64_t recall_steps = 0;
  double nll_sparse = 0.0;  // nats
  double nll_dense = 0.0;
  double kl = 0.0;
  int64_t top1_agree = 0;
  double topk_recall = 0.0;  // per recall step: mean over sparse layers
  double mass_recall = 0.0;

  double perplexity() const { return std::exp(nll_sparse / Steps()); }
  double dense_perplexity() const { return std::exp(nll_dense / Steps()); }
  double mean_kl() const { return kl / Steps(); }
  double top1_agreement() const { return top1_agree / Steps(); }
  // 1 when no layer is sparse (every token attended).
  double mean_topk_recall() const {
    return recall_steps > 0 ? topk_recall / recall_steps : 1.0;
  }
  double mean_mass_recall() const {
    return recall_steps > 0 ? mass_recall / recall_steps : 1.0;
  }

 private:
  double Steps() const { return steps > 0 ? static_cast<double>(steps) : 1.0; }
};

// One result per entry of `configs`, in order. Every config must be a valid
// fork of `base` (ClusteredKvStore::Fork: it may change policy, budget,
// gqa_selection, recent_tokens, cache_steps). INVALID_ARGUMENT when the text
// is shorter than windows * (prompt_tokens + decode_tokens) + 1 tokens, an
// id is outside the vocabulary or an option is out of range.
absl::StatusOr<std::vector<TextEvalResult>> EvaluateOnText(
    Transformer& tf, const ModelConfig& c, absl::Span<const int32_t> text,
    const TextEvalOptions& o, const KvStoreConfig& base,
    absl::Span<const KvStoreConfig> configs);

}  // namespace ckv
