#include "bench/cluster_options.h"

#include <algorithm>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_common.h"

namespace ckv::bench {
namespace {

const ClusterBenchOptions& Defaults() {
  static const ClusterBenchOptions* const kDefaults = new ClusterBenchOptions;
  return *kDefaults;
}

// Settings --quick replaces unless the corresponding flag is changed.
constexpr int64_t kQuickKeyContexts[] = {4096};
constexpr int kQuickBudgets[] = {256, 1024};
constexpr int64_t kQuickEngineContexts[] = {4096};
constexpr int kQuickBatches[] = {1, 4};
constexpr int kQuickKeyQueries = 4;
constexpr int kQuickTimingSteps = 8;
constexpr int kQuickDecodeSteps = 4;

}  // namespace
}  // namespace ckv::bench

using ckv::bench::Defaults;

ABSL_FLAG(std::string, json, Defaults().out_json,
          "where the JSON goes; the plots are written next to it");
ABSL_FLAG(std::string, work_dir, Defaults().work_dir,
          "where the random engine model is cached");
ABSL_FLAG(bool, quick, false,
          "about a minute: keys and engine at 4k, budgets 256,1024, "
          "batches 1,4");
ABSL_FLAG(int, threads, Defaults().threads,
          "compute threads (0: every hardware thread)");
ABSL_FLAG(std::string, backend, ckv::BackendKindName(Defaults().backend),
          "compute backend of the engine and text workloads: "
          "auto|cpu|cuda|fake (fake: the fake device, for tests; cuda is "
          "not built yet)");
ABSL_FLAG(uint64_t, seed, Defaults().seed, "seed of keys, queries, tokens");
ABSL_FLAG(std::string, workloads, "keys,engine",
          "comma-separated: keys, engine, text (a real model on real text)");
ABSL_FLAG(std::string, budgets, absl::StrJoin(Defaults().budgets, ","),
          "token budgets B of the sparse policies");
ABSL_FLAG(std::string, key_contexts,
          absl::StrJoin(Defaults().key_contexts, ","),
          "keys: context lengths; the largest also runs the metric and "
          "tokens-per-cluster ablations and the attention-layer timing");
ABSL_FLAG(std::string, tokens_per_cluster,
          absl::StrJoin(Defaults().tokens_per_cluster, ","),
          "keys: tokens-per-cluster ratios of the ablation");
ABSL_FLAG(int, key_queries, Defaults().key_queries,
          "keys: decode steps measured per configuration");
ABSL_FLAG(int, timing_steps, Defaults().timing_steps,
          "keys: timed steps of one attention layer per policy");
ABSL_FLAG(std::string, engine_contexts,
          absl::StrJoin(Defaults().engine_contexts, ","),
          "engine: prefilled context lengths");
ABSL_FLAG(std::string, batches, absl::StrJoin(Defaults().batches, ","),
          "engine: sessions decoding together (forks of one prefill)");
ABSL_FLAG(int, decode_steps, Defaults().decode_steps,
          "engine: timed decode steps per run (after one untimed step)");
ABSL_FLAG(int, layers, Defaults().model.layers, "engine: model layers");
ABSL_FLAG(int, ffn, Defaults().model.ffn, "engine: feed-forward dimension");
ABSL_FLAG(std::string, engine_model, Defaults().engine_model,
          "engine: GGUF model to run instead of the random one (--layers "
          "and --ffn then do not apply)");
ABSL_FLAG(std::string, engine_policies, "",
          "engine: comma-separated sparse policies to decode (empty: every "
          "selecting policy; full always runs)");
ABSL_FLAG(int, dense_layers, Defaults().dense_layers,
          "engine: layers below this attend densely");
ABSL_FLAG(int, prefill_chunk, Defaults().prefill_chunk,
          "engine: max tokens per forward step during prefill");
ABSL_FLAG(bool, engine_quality, Defaults().engine_quality,
          "engine: measure recall on session 0 of the first batch size");
ABSL_FLAG(bool, engine_synthetic, Defaults().engine_synthetic,
          "engine: build each context's session from synthetic clustered "
          "keys appended to every layer (no prefill; for large models on a "
          "device)");
ABSL_FLAG(std::string, kv_residency,
          ckv::KvResidencyName(Defaults().kv_residency),
          "engine on a device backend: segment K,V residency "
          "(auto|device|offload)");
ABSL_FLAG(std::string, gqa_selection,
          ckv::GqaSelectionName(Defaults().gqa_selection),
          "engine: per_query_head or per_kv_head selection");
ABSL_FLAG(std::string, weight_type,
          ckv::kernels::DTypeName(Defaults().model.dtype),
          "engine: weight type of the random model (f32, f16, bf16, q8_0, "
          "...)");
ABSL_FLAG(std::string, engine_prefill_cache, Defaults().engine_prefill_cache,
          "engine: folder of saved prefills; a context prefilled before with "
          "the same model, store layout, seed and chunk is restored from "
          "there instead of prefilled again (its prefill figures are the "
          "saved ones); empty: always prefill");
ABSL_FLAG(std::string, text_model, Defaults().text_model,
          "text: GGUF model with real attention");
ABSL_FLAG(std::string, text_file, Defaults().text_file,
          "text: held-out text the model was not trained on");
ABSL_FLAG(int64_t, text_prompt_tokens, Defaults().text_prompt_tokens,
          "text: tokens prefilled per window");
ABSL_FLAG(int64_t, text_decode_tokens, Defaults().text_decode_tokens,
          "text: tokens decoded and scored per window");
ABSL_FLAG(int, text_windows, Defaults().text_windows,
          "text: consecutive windows of the text");
ABSL_FLAG(int, text_recall_every, Defaults().text_recall_every,
          "text: decode steps between recall measurements");
ABSL_FLAG(int, text_dense_layers, Defaults().text_dense_layers,
          "text: layers below this attend densely");
ABSL_FLAG(std::string, text_budgets,
          absl::StrJoin(Defaults().text_budgets, ","),
          "text: budgets of the quality table");
ABSL_FLAG(std::string, text_metric_budgets,
          absl::StrJoin(Defaults().text_metric_budgets, ","),
          "text: budgets of the clustering-metric ablation");

namespace ckv::bench {
namespace {

absl::Status ReadWorkloads(ClusterBenchOptions& o) {
  o.run_keys = o.run_engine = o.run_text = false;
  for (absl::string_view w :
       absl::StrSplit(absl::GetFlag(FLAGS_workloads), ',', absl::SkipEmpty())) {
    if (w == "keys") {
      o.run_keys = true;
    } else if (w == "engine") {
      o.run_engine = true;
    } else if (w == "text") {
      o.run_text = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--workloads: unknown workload '", w, "'"));
    }
  }
  if (!o.run_keys && !o.run_engine && !o.run_text) {
    return absl::InvalidArgumentError("--workloads is empty");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadList(const char* name, const absl::Flag<std::string>& flag,
                      T min, std::vector<T>* out) {
  auto v = ParseList<T>(name, absl::GetFlag(flag), min);
  if (!v.ok()) return v.status();
  *out = *std::move(v);
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return absl::OkStatus();
}

absl::Status ReadLists(ClusterBenchOptions& o) {
  for (absl::Status s :
       {ReadList<int>("budgets", FLAGS_budgets, 1, &o.budgets),
        ReadList<int64_t>("key_contexts", FLAGS_key_contexts, 64,
                          &o.key_contexts),
        ReadList<int>("tokens_per_cluster", FLAGS_tokens_per_cluster, 1,
                      &o.tokens_per_cluster),
        ReadList<int64_t>("engine_contexts", FLAGS_engine_contexts, 64,
                          &o.engine_contexts),
        ReadList<int>("batches", FLAGS_batches, 1, &o.batches),
        ReadList<int>("text_budgets", FLAGS_text_budgets, 1, &o.text_budgets),
        ReadList<int>("text_metric_budgets", FLAGS_text_metric_budgets, 1,
                      &o.text_metric_budgets)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadScalars(ClusterBenchOptions& o) {
  o.out_json = absl::GetFlag(FLAGS_json);
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.threads = absl::GetFlag(FLAGS_threads);
  auto backend = ParseBackendFlag(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.key_queries = absl::GetFlag(FLAGS_key_queries);
  o.timing_steps = absl::GetFlag(FLAGS_timing_steps);
  o.decode_steps = absl::GetFlag(FLAGS_decode_steps);
  o.model.layers = absl::GetFlag(FLAGS_layers);
  o.model.ffn = absl::GetFlag(FLAGS_ffn);
  o.engine_model = absl::GetFlag(FLAGS_engine_model);
  o.engine_policies = absl::StrSplit(absl::GetFlag(FLAGS_engine_policies), ',',
                                     absl::SkipEmpty());
  o.dense_layers = absl::GetFlag(FLAGS_dense_layers);
  o.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  o.engine_quality = absl::GetFlag(FLAGS_engine_quality);
  o.engine_prefill_cache = absl::GetFlag(FLAGS_engine_prefill_cache);
  o.engine_synthetic = absl::GetFlag(FLAGS_engine_synthetic);
  auto residency = ParseKvResidency(absl::GetFlag(FLAGS_kv_residency));
  if (!residency.ok()) return residency.status();
  o.kv_residency = *residency;
  auto gqa = ParseGqaSelection(absl::GetFlag(FLAGS_gqa_selection));
  if (!gqa.ok()) return gqa.status();
  o.gqa_selection = *gqa;
  const std::string wt = absl::GetFlag(FLAGS_weight_type);
  if (!kernels::ParseDTypeName(wt.c_str(), &o.model.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_type: unknown type '", wt, "'"));
  }
  o.text_model = absl::GetFlag(FLAGS_text_model);
  o.text_file = absl::GetFlag(FLAGS_text_file);
  o.text_prompt_tokens = absl::GetFlag(FLAGS_text_prompt_tokens);
  o.text_decode_tokens = absl::GetFlag(FLAGS_text_decode_tokens);
  o.text_windows = absl::GetFlag(FLAGS_text_windows);
  o.text_recall_every = absl::GetFlag(FLAGS_text_recall_every);
  o.text_dense_layers = absl::GetFlag(FLAGS_text_dense_layers);
  if (o.text_prompt_tokens < 1 || o.text_decode_tokens < 1 ||
      o.text_windows < 1 || o.text_recall_every < 1 ||
      o.text_dense_layers < 0) {
    return absl::InvalidArgumentError(
        "--text_prompt_tokens, --text_decode_tokens, --text_windows and "
        "--text_recall_every must be >= 1, --text_dense_layers >= 0");
  }
  if (o.out_json.empty()) return absl::InvalidArgumentError("--json is empty");
  if (o.threads < 0 || o.key_queries < 1 || o.timing_steps < 1 ||
      o.decode_steps < 1 || o.model.layers < 1 || o.model.ffn < 1 ||
      o.prefill_chunk < 1) {
    return absl::InvalidArgumentError(
        "--threads must be >= 0; --key_queries, --timing_steps, "
        "--decode_steps, --layers, --ffn and --prefill_chunk >= 1");
  }
  if (o.dense_layers < 0 ||
      (o.engine_model.empty() && o.dense_layers > o.model.layers)) {
    return absl::InvalidArgumentError("--dense_layers must be in [0, layers]");
  }
  return ReadWorkloads(o);
}

void ApplyQuickPreset(ClusterBenchOptions& o) {
  if (!Changed(FLAGS_key_contexts)) {
    o.key_contexts.assign(std::begin(kQuickKeyContexts),
                          std::end(kQuickKeyContexts));
  }
  if (!Changed(FLAGS_budgets)) {
    o.budgets.assign(std::begin(kQuickBudgets), std::end(kQuickBudgets));
  }
  if (!Changed(FLAGS_engine_contexts)) {
    o.engine_contexts.assign(std::begin(kQuickEngineContexts),
                             std::end(kQuickEngineContexts));
  }
  if (!Changed(FLAGS_batches)) {
    o.batches.assign(std::begin(kQuickBatches), std::end(kQuickBatches));
  }
  if (!Changed(FLAGS_key_queries)) o.key_queries = kQuickKeyQueries;
  if (!Changed(FLAGS_timing_steps)) o.timing_steps = kQuickTimingSteps;
  if (!Changed(FLAGS_decode_steps)) o.decode_steps = kQuickDecodeSteps;
}

}  // namespace

absl::StatusOr<ClusterBenchOptions> ClusterBenchOptionsFromFlags() {
  ClusterBenchOptions o;
  if (auto s = ReadScalars(o); !s.ok()) return s;
  if (auto s = ReadLists(o); !s.ok()) return s;
  o.quick = absl::GetFlag(FLAGS_quick);
  if (o.quick) ApplyQuickPreset(o);
  return o;
}

}  // namespace ckv::bench
