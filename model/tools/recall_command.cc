#include "model/tools/recall_command.h"

#include <algorithm>
#include <cstdint>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/kv/policies/registry.h"
#include "model/kv/quality.h"
#include "model/model.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, prompt_tokens, 0,
          "recall: tokens of --tokens-file prefilled as the prompt");
ABSL_FLAG(std::string, recall_policies, "",
          "recall: comma-separated policies measured one after another in "
          "one run, one JSON line each (\"all\": every registered policy); "
          "empty: --policy");

namespace ckv {
namespace {

// Sums of the per-step measures; Json() turns them into means.
struct RecallTotals {
  struct Layer {
    int layer = 0;
    double topk = 0, mass = 0, err = 0;
  };
  int64_t steps = 0;
  double kl = 0;
  int64_t top1 = 0;
  std::vector<Layer> layers;

  void AddLayer(size_t i, const LayerQuality& q) {
    layers[i].topk += q.topk_recall;
    layers[i].mass += q.mass_recall;
    layers[i].err += q.output_rel_err;
  }
  nlohmann::ordered_json Json() const;
};

nlohmann::ordered_json RecallTotals::Json() const {
  const double n = std::max<int64_t>(steps, 1);
  nlohmann::ordered_json j, per_layer = nlohmann::ordered_json::array();
  double topk = 0, mass = 0, err = 0;
  for (const Layer& l : layers) {
    per_layer.push_back({{"layer", l.layer},
                         {"topk_recall", l.topk / n},
                         {"mass_recall", l.mass / n},
                         {"output_rel_err", l.err / n}});
    topk += l.topk;
    mass += l.mass;
    err += l.err;
  }
  // With no sparse layer every token is attended: recall 1, error 0.
  const double cells = layers.empty() ? 0 : n * layers.size();
  j["steps"] = steps;
  j["topk_recall"] = layers.empty() ? 1.0 : topk / cells;
  j["mass_recall"] = layers.empty() ? 1.0 : mass / cells;
  j["kl"] = kl / n;
  j["top1_agreement"] = static_cast<double>(top1) / n;
  j["output_rel_err"] = layers.empty() ? 0.0 : err / cells;
  j["layers"] = per_layer;
  return j;
}

absl::Status ValidatePromptTokens(int64_t p, int64_t n) {
  if (p >= 1 && p < n) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "recall needs 1 <= --prompt-tokens < the number of tokens in "
      "--tokens-file (",
      n, "); got ", p));
}

absl::Status ValidateIds(const std::vector<int32_t>& tokens, int vocab_size) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " of --tokens-file: id ", tokens[i],
                       " outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

nlohmann::ordered_json ConfigJson(const KvStoreConfig& kv,
                                  int64_t prompt_tokens) {
  return {{"policy", KvPolicyName(kv.policy)},
          {"budget", kv.budget},
          {"sink_tokens", kv.sink_tokens},
          {"tokens_per_cluster", kv.tokens_per_cluster},
          {"window", kv.window},
          {"dense_layers", kv.dense_layers},
          {"gqa_selection", GqaSelectionName(kv.gqa_selection)},
          {"recent_tokens", kv.recent_tokens},
          {"kv_dtype", kernels::DTypeName(kv.kv_dtype)},
          {"prompt_tokens", prompt_tokens}};
}

// The sparse session (clustered store, recording) and its dense shadow.
struct Sessions {
  ClusterWorker worker;
  ClusteredKvStore sparse;
  DenseKvCache dense;
  std::vector<float> sparse_logits, dense_logits;

  Sessions(const ModelConfig& c, const KvStoreConfig& kv)
      : sparse(KvShapeOf(c), kv, &worker),
        dense(DenseCacheOptions(c, kv.kv_dtype, kv.max_tokens)) {
    sparse.set_record_selection(true);
  }

  // Feeds the same tokens to both sessions in one batch.
  absl::Status Feed(Transformer& tf, absl::Span<const int32_t> tokens,
                    AppendKind kind) {
    SequenceInput in[2] = {
        MakeInput(tokens, &sparse, LogitsMode::kLast, &sparse_logits, kind),
        MakeInput(tokens, &dense, LogitsMode::kLast, &dense_logits, kind)};
    return tf.Forward(absl::MakeSpan(in, 2));
  }
};

// The policies of --recall-policies, or the configured one.
absl::StatusOr<std::vector<KvPolicy>> RecallPolicies(KvPolicy configured) {
  const std::string list = absl::GetFlag(FLAGS_recall_policies);
  std::vector<KvPolicy> out;
  if (list.empty()) return std::vector<KvPolicy>{configured};
  if (list == "all") {
    for (const PolicyInfo& p : RegisteredPolicies()) out.push_back(p.id);
    return out;
  }
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    auto p = ParseKvPolicy(std::string(name));
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--recall-policies: ", p.status().message()));
    }
    out.push_back(*p);
  }
  return out;
}

// Measures the decode step just fed into `s` and adds it to `t`.
absl::Status MeasureStep(Sessions& s, int vocab_size, RecallTotals* t) {
  for (size_t i = 0; i < t->layers.size(); ++i) {
    auto q = MeasureLastDecode(s.sparse, t->layers[i].layer);
    if (!q.ok()) return q.status();
    t->AddLayer(i, *q);
  }
  t->kl += LogitKl(s.dense_logits.data(), s.sparse_logits.data(), vocab_size);
  t->top1 +=
      SameArgmax(s.dense_logits.data(), s.sparse_logits.data(), vocab_size);
  ++t->steps;
  return absl::OkStatus();
}

// One sparse session with `kv` and its dense shadow over `tokens`, the
// first p as the prompt: one JSON line of RunRecall.
absl::StatusOr<nlohmann::ordered_json> RecallOne(
    Transformer& tf, const ModelConfig& c, const std::vector<int32_t>& tokens,
    int64_t p, const KvStoreConfig& kv) {
  Sessions sessions(c, kv);
  const absl::Span<const int32_t> all(tokens);
  if (auto s = sessions.Feed(tf, all.subspan(0, p), AppendKind::kPrompt);
      !s.ok()) {
    return s;
  }
  RecallTotals totals;
  for (int l = std::max(0, kv.dense_layers); l < c.n_layers; ++l) {
    totals.layers.push_back({l});
  }
  for (size_t i = p; i < tokens.size(); ++i) {
    if (auto s = sessions.Feed(tf, all.subspan(i, 1), AppendKind::kGenerated);
        !s.ok()) {
      return s;
    }
    if (auto s = MeasureStep(sessions, c.vocab_size, &totals); !s.ok()) {
      return s;
    }
  }
  nlohmann::ordered_json j = totals.Json();
  j["config"] = ConfigJson(kv, p);
  return j;
}

}  // namespace

absl::Status RunRecall(const std::string& model_path,
                       const std::vector<int32_t>& tokens,
                       const CliOptions& o) {
  const int64_t p = absl::GetFlag(FLAGS_prompt_tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (auto s = ValidatePromptTokens(p, n); !s.ok()) return s;
  auto model = LoadModel(model_path);
  if (!model.ok()) return model.status();
  const ModelConfig& c = (*model)->config;
  if (auto s = ValidateIds(tokens, c.vocab_size); !s.ok()) return s;
  auto policies = RecallPolicies(o.kv.policy);
  if (!policies.ok()) return policies.status();
  auto tf = NewToolTransformer(c, (*model)->weights, o);
  if (!tf.ok()) return tf.status();
  for (KvPolicy policy : *policies) {
    KvStoreConfig kv = o.kv;
    kv.policy = policy;
    auto j = RecallOne(**tf, c, tokens, p, kv);
    if (!j.ok()) return j.status();
    std::cout << j->dump() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace ckv
