#include "model/tools/recall_command.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/kv/policies/registry.h"
#include "model/kv/quality.h"
#include "model/kv/span_probe.h"
#include "model/model.h"
#include "model/transformer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, prompt_tokens, 0,
          "recall: tokens of --tokens-file prefilled as the prompt");
ABSL_FLAG(std::string, recall_policies, "",
          "recall: comma-separated policies measured one after another in "
          "one run, one JSON line each (\"all\": every registered policy); "
          "empty: --policy");

ABSL_FLAG(std::string, probe_span, "",
          "recall: BEGIN:END, positions of a span (e.g. a needle's tokens): "
          "each decode step adds where clusterkv left the span's keys "
          "(model/kv/span_probe.h) to \"span_probe\"");

namespace ckv {
namespace {

// --probe-span as [begin, end); {-1, -1} when not given.
absl::StatusOr<std::pair<int64_t, int64_t>> ProbeSpanFlag() {
  const std::string v = absl::GetFlag(FLAGS_probe_span);
  if (v.empty()) return std::make_pair(int64_t{-1}, int64_t{-1});
  std::vector<std::string> parts = absl::StrSplit(v, ':');
  int64_t b = 0, e = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &b) ||
      !absl::SimpleAtoi(parts[1], &e) || b < 0 || e <= b) {
    return absl::InvalidArgumentError(
        absl::StrCat("--probe-span wants BEGIN:END with 0 <= BEGIN < END, "
                     "got \"",
                     v, "\""));
  }
  return std::make_pair(b, e);
}

int64_t Argmax(const std::vector<float>& x) {
  return std::max_element(x.begin(), x.end()) - x.begin();
}

// One decode step's span probe of `layer`: {"layer", "heads": [...]}.
nlohmann::ordered_json SpanProbeJson(int layer,
                                     const std::vector<SpanHeadProbe>& heads) {
  nlohmann::ordered_json hs = nlohmann::ordered_json::array();
  for (const SpanHeadProbe& h : heads) {
    nlohmann::ordered_json keys = nlohmann::ordered_json::array();
    for (const SpanKey& k : h.keys) {
      keys.push_back({{"pos", k.pos},
                      {"score", k.score},
                      {"weight", k.weight},
                      {"key_rank", k.key_rank},
                      {"segment", k.segment},
                      {"cluster", k.cluster},
                      {"cluster_rank", k.cluster_rank},
                      {"tokens_ahead", k.tokens_ahead},
                      {"cluster_size", k.cluster_size},
                      {"span_members", k.span_members},
                      {"cluster_score", k.cluster_score},
                      {"selected", k.selected}});
    }
    hs.push_back({{"head", h.head},
                  {"target", h.target},
                  {"span_weight", h.span_weight},
                  {"clusters", h.clusters},
                  {"clustered", h.clustered},
                  {"top_cluster_score", h.top_cluster_score},
                  {"keys", keys}});
  }
  return {{"layer", layer}, {"heads", hs}};
}

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
// first p as the prompt: one JSON line of RunRecall; with span.first >= 0
// also the span probe of every decode step.
absl::StatusOr<nlohmann::ordered_json> RecallOne(
    Transformer& tf, const ModelConfig& c, const std::vector<int32_t>& tokens,
    int64_t p, const KvStoreConfig& kv, std::pair<int64_t, int64_t> span) {
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
  nlohmann::ordered_json probes = nlohmann::ordered_json::array();
  for (size_t i = p; i < tokens.size(); ++i) {
    if (auto s = sessions.Feed(tf, all.subspan(i, 1), AppendKind::kGenerated);
        !s.ok()) {
      return s;
    }
    if (auto s = MeasureStep(sessions, c.vocab_size, &totals); !s.ok()) {
      return s;
    }
    if (span.first < 0) continue;
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const RecallTotals::Layer& l : totals.layers) {
      auto heads = ProbeSpan(sessions.sparse, l.layer, span.first, span.second);
      if (!heads.ok()) return heads.status();
      layers.push_back(SpanProbeJson(l.layer, *heads));
    }
    probes.push_back(
        {{"q_pos", static_cast<int64_t>(i)},
         {"next_token", i + 1 < tokens.size() ? tokens[i + 1] : -1},
         {"dense_argmax", Argmax(sessions.dense_logits)},
         {"sparse_argmax", Argmax(sessions.sparse_logits)},
         {"layers", layers}});
  }
  nlohmann::ordered_json j = totals.Json();
  if (span.first >= 0) j["span_probe"] = probes;
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
  auto span = ProbeSpanFlag();
  if (!span.ok()) return span.status();
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
    auto j = RecallOne(**tf, c, tokens, p, kv, *span);
    if (!j.ok()) return j.status();
    std::cout << j->dump() << "\n";
  }
  return absl::OkStatus();
}

}  // namespace ckv
