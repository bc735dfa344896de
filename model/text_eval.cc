#include "model/text_eval.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "model/dense_kv_cache.h"
#include "model/kv/cluster_worker.h"
#include "model/kv/clustered_store.h"
#include "model/kv/quality.h"
#include "model/model.h"

namespace ckv {
namespace {

absl::Status Validate(const ModelConfig& c, absl::Span<const int32_t> text,
                      const TextEvalOptions& o) {
  if (o.prompt_tokens < 1 || o.decode_tokens < 1 || o.windows < 1 ||
      o.recall_every < 1) {
    return absl::InvalidArgumentError(
        "text evaluation needs prompt_tokens, decode_tokens, windows and "
        "recall_every >= 1");
  }
  const int64_t need = o.windows * (o.prompt_tokens + o.decode_tokens) + 1;
  if (static_cast<int64_t>(text.size()) < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text evaluation needs ", need, " tokens of text, got ", text.size()));
  }
  for (int32_t id : text) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside the vocabulary"));
    }
  }
  return absl::OkStatus();
}

// -log softmax(logits)[target], in double.
double NextTokenNll(const std::vector<float>& logits, int32_t target) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return std::log(sum) - (static_cast<double>(logits[target]) - mx);
}

// One window: the prefilled base store and dense cache, and the forks.
struct Window {
  ClusterWorker worker;
  std::unique_ptr<ClusteredKvStore> base;
  std::unique_ptr<DenseKvCache> dense;
  std::vector<std::unique_ptr<ClusteredKvStore>> forks;
  std::vector<float> dense_logits;
  std::vector<std::vector<float>> logits;
};

absl::Status Prefill(Transformer& tf, const ModelConfig& c,
                     absl::Span<const int32_t> prompt,
                     const KvStoreConfig& base,
                     absl::Span<const KvStoreConfig> configs, Window& w) {
  KvStoreConfig b = base;
  b.build_all_indexes = true;
  w.base = std::make_unique<ClusteredKvStore>(KvShapeOf(c), b, &w.worker);
  w.dense = std::make_unique<DenseKvCache>(
      DenseCacheOptions(c, base.kv_dtype, base.max_tokens));
  std::vector<float> base_logits;
  SequenceInput in[2] = {
      MakeInput(prompt, w.base.get(), LogitsMode::kLast, &base_logits),
      MakeInput(prompt, w.dense.get(), LogitsMode::kLast, &w.dense_logits)};
  if (auto s = tf.Forward(absl::MakeSpan(in, 2)); !s.ok()) return s;
  for (int l = 0; l < c.n_layers; ++l) w.base->WaitForIndex(l);
  for (const KvStoreConfig& kv : configs) {
    KvStoreConfig child = kv;
    child.build_all_indexes = true;
    auto fork = w.base->Fork(child);
    if (!fork.ok()) return fork.status();
    (*fork)->set_record_selection(true);
    w.forks.push_back(*std::move(fork));
  }
  w.logits.resize(configs.size());
  return absl::OkStatus();
}

// Adds the recall of the step just decoded by `store` to `r`.
absl::Status AddRecall(const ClusteredKvStore& store, int n_layers,
                       TextEvalResult& r) {
  const int first = std::max(0, store.config().dense_layers);
  if (first >= n_layers) return absl::OkStatus();
  double topk = 0.0, mass = 0.0;
  for (int l = first; l < n_layers; ++l) {
    auto q = MeasureLastDecode(store, l);
    if (!q.ok()) return q.status();
    topk += q->topk_recall;
    mass += q->mass_recall;
  }
  r.topk_recall += topk / (n_layers - first);
  r.mass_recall += mass / (n_layers - first);
  ++r.recall_steps;
  return absl::OkStatus();
}

// Decodes the window's tokens (text[0..n), the target of step i being
// text[i + 1]) through every fork and the dense cache in one batch per step.
absl::Status DecodeWindow(Transformer& tf, const ModelConfig& c,
                          absl::Span<const int32_t> text, int64_t n,
                          int recall_every, Window& w,
                          std::vector<TextEvalResult>& out) {
  const size_t k = w.forks.size();
  std::vector<SequenceInput> batch(k + 1);
  for (int64_t i = 0; i < n; ++i) {
    const absl::Span<const int32_t> tok = text.subspan(i, 1);
    for (size_t j = 0; j < k; ++j) {
      batch[j] = MakeInput(tok, w.forks[j].get(), LogitsMode::kLast,
                           &w.logits[j], AppendKind::kGenerated);
    }
    batch[k] = MakeInput(tok, w.dense.get(), LogitsMode::kLast, &w.dense_logits,
                         AppendKind::kGenerated);
    if (auto s = tf.Forward(absl::MakeSpan(batch)); !s.ok()) return s;
    const int32_t target = text[i + 1];
    const double dense_nll = NextTokenNll(w.dense_logits, target);
    for (size_t j = 0; j < k; ++j) {
      TextEvalResult& r = out[j];
      r.nll_sparse += NextTokenNll(w.logits[j], target);
      r.nll_dense += dense_nll;
      r.kl += LogitKl(w.dense_logits.data(), w.logits[j].data(), c.vocab_size);
      r.top1_agree +=
          SameArgmax(w.dense_logits.data(), w.logits[j].data(), c.vocab_size);
      ++r.steps;
      if (i % recall_every == 0) {
        if (auto s = AddRecall(*w.forks[j], c.n_layers, r); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TextEvalResult>> EvaluateOnText(
    Transformer& tf, const ModelConfig& c, absl::Span<const int32_t> text,
    const TextEvalOptions& o, const KvStoreConfig& base,
    absl::Span<const KvStoreConfig> configs) {
  if (auto s = Validate(c, text, o); !s.ok()) return s;
  std::vector<TextEvalResult> out(configs.size());
  for (size_t j = 0; j < configs.size(); ++j) out[j].kv = configs[j];
  const int64_t span = o.prompt_tokens + o.decode_tokens;
  for (int win = 0; win < o.windows; ++win) {
    const absl::Span<const int32_t> window = text.subspan(win * span, span + 1);
    Window w;
    if (auto s = Prefill(tf, c, window.subspan(0, o.prompt_tokens), base,
                         configs, w);
        !s.ok()) {
      return s;
    }
    if (auto s = DecodeWindow(tf, c, window.subspan(o.prompt_tokens),
                              o.decode_tokens, o.recall_every, w, out);
        !s.ok()) {
      return s;
    }
  }
  return out;
}

}  // namespace ckv
