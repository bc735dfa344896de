#include "bench/cluster_text.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/kv/policies/registry.h"
#include "model/model.h"
#include "model/text_eval.h"
#include "model/transformer.h"

namespace ckv::bench {
namespace {

// The hybrid policy of the tables: clusterkv that always keeps the most
// recent budget / kHybridRecentDivisor clustered tokens.
constexpr int kHybridRecentDivisor = 4;

struct NamedConfig {
  std::string name;  // the record's policy label
  KvStoreConfig kv;
};

absl::StatusOr<std::vector<int32_t>> ReadTokens(const Model& model,
                                                const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return model.tokenizer->Encode(ss.str(), /*add_special=*/false,
                                 /*parse_special=*/false);
}

KvStoreConfig BaseConfig(const ClusterBenchOptions& o, ClusterMetric metric) {
  KvStoreConfig kv;
  kv.policy = KvPolicy::kClusterKv;
  kv.dense_layers = o.text_dense_layers;
  kv.metric = metric;
  kv.async_clustering = true;
  return kv;
}

absl::StatusOr<std::vector<NamedConfig>> QualityConfigs(
    const ClusterBenchOptions& o) {
  auto oracle = ParseKvPolicy("oracle");  // registered, no enum constant
  if (!oracle.ok()) return oracle.status();
  const KvStoreConfig base = BaseConfig(o, ClusterMetric::kCosine);
  std::vector<NamedConfig> out;
  KvStoreConfig full = base;
  full.policy = KvPolicy::kFull;
  out.push_back({"full", full});
  for (int b : o.text_budgets) {
    for (KvPolicy p : {KvPolicy::kClusterKv, KvPolicy::kQuest,
                       KvPolicy::kStreaming, *oracle}) {
      KvStoreConfig kv = base;
      kv.policy = p;
      kv.budget = b;
      out.push_back({KvPolicyName(p), kv});
    }
    KvStoreConfig hybrid = base;
    hybrid.budget = b;
    hybrid.recent_tokens = b / kHybridRecentDivisor;
    out.push_back({"hybrid", hybrid});
  }
  return out;
}

RunRecord Record(const std::string& experiment, const NamedConfig& c,
                 const TextEvalResult& r, const TextEvalOptions& t,
                 const char* metric) {
  RunRecord rec;
  rec.workload = "text";
  rec.experiment = experiment;
  rec.policy = c.name;
  rec.context = t.prompt_tokens;
  rec.budget = c.kv.policy == KvPolicy::kFull ? 0 : c.kv.budget;
  rec.topk_recall = r.mean_topk_recall();
  rec.mass_recall = r.mean_mass_recall();
  rec.extra["metric"] = metric;
  rec.extra["recent_tokens"] = c.kv.recent_tokens;
  rec.extra["perplexity"] = r.perplexity();
  rec.extra["dense_perplexity"] = r.dense_perplexity();
  rec.extra["perplexity_delta"] = r.perplexity() - r.dense_perplexity();
  rec.extra["kl"] = r.mean_kl();
  rec.extra["top1_agreement"] = r.top1_agreement();
  rec.extra["scored_tokens"] = r.steps;
  rec.extra["recall_steps"] = r.recall_steps;
  return rec;
}

absl::Status Evaluate(Transformer& tf, const ModelConfig& mc,
                      const std::vector<int32_t>& text,
                      const TextEvalOptions& t, const KvStoreConfig& base,
                      const std::vector<NamedConfig>& configs,
                      const std::string& experiment, const char* metric,
                      ClusterReport* report) {
  std::vector<KvStoreConfig> kvs;
  for (const NamedConfig& c : configs) kvs.push_back(c.kv);
  const auto t0 = std::chrono::steady_clock::now();
  auto results = EvaluateOnText(tf, mc, text, t, base, kvs);
  if (!results.ok()) return results.status();
  std::fprintf(
      stderr, "cluster_bench: text %s/%s: %zu configs in %.1f s\n",
      experiment.c_str(), metric, configs.size(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count());
  for (size_t i = 0; i < configs.size(); ++i) {
    report->runs.push_back(
        Record(experiment, configs[i], (*results)[i], t, metric));
    PrintRecord(report->runs.back(), stdout);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTextWorkload(const ClusterBenchOptions& o, int threads,
                             ClusterReport* report) {
  auto model = LoadModel(o.text_model);
  if (!model.ok()) return model.status();
  auto text = ReadTokens(**model, o.text_file);
  if (!text.ok()) return text.status();
  const ModelConfig& mc = (*model)->config;
  TransformerOptions topt;
  topt.threads = threads;
  auto made = NewTransformer(mc, (*model)->weights, topt, o.backend);
  if (!made.ok()) return made.status();
  Transformer& tf = **made;
  TextEvalOptions t;
  t.prompt_tokens = o.text_prompt_tokens;
  t.decode_tokens = o.text_decode_tokens;
  t.windows = o.text_windows;
  t.recall_every = o.text_recall_every;
  report->text_model = {{"path", o.text_model},
                        {"layers", mc.n_layers},
                        {"heads", mc.n_heads},
                        {"kv_heads", mc.n_kv_heads},
                        {"head_dim", mc.head_dim},
                        {"vocab", mc.vocab_size},
                        {"text", o.text_file},
                        {"text_tokens", text->size()},
                        {"dense_layers", o.text_dense_layers}};
  auto configs = QualityConfigs(o);
  if (!configs.ok()) return configs.status();
  if (auto s = Evaluate(tf, mc, *text, t, BaseConfig(o, ClusterMetric::kCosine),
                        *configs, "quality", "cosine", report);
      !s.ok()) {
    return s;
  }
  for (ClusterMetric m : {ClusterMetric::kCosine, ClusterMetric::kL2,
                          ClusterMetric::kInnerProduct}) {
    const KvStoreConfig base = BaseConfig(o, m);
    std::vector<NamedConfig> configs;
    for (int b : o.text_metric_budgets) {
      KvStoreConfig kv = base;
      kv.budget = b;
      configs.push_back({"clusterkv", kv});
    }
    if (auto s = Evaluate(tf, mc, *text, t, base, configs, "metric",
                          MetricName(m), report);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace ckv::bench
