#include "model/tools/cli_options.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "model/kv/policies/registry.h"

ABSL_FLAG(std::string, text_file, "", "tokenize: file with the text");
ABSL_FLAG(bool, bos, false, "tokenize: add BOS/EOS as the vocabulary says");
ABSL_FLAG(bool, parse_special, false,
          "tokenize: match special tokens written in the text");
ABSL_FLAG(std::string, tokens_file, "", "logits: whitespace-separated ids");
ABSL_FLAG(std::string, positions, "last", "logits: all|last");
ABSL_FLAG(std::string, prompt, "Once upon a time", "generate: prompt text");
ABSL_FLAG(std::string, prompt_file, "", "generate: read the prompt from F");
// Sampling: one flag per scalar setting of the schema
// (common/settings_schema.h); --seed is also the make-random seed.
namespace {
ckv::SamplingParams CliSamplingDefaults() {
  ckv::SamplingParams p;
  p.max_tokens = 64;  // a short demo generation
  p.seed = 1;
  return p;
}
const ckv::SamplingParams kSampling = CliSamplingDefaults();
}  // namespace
#define CKV_SAMPLING_FLAG(name, type, range, help) \
  ABSL_FLAG(type, name, kSampling.name, "generate: " help);
CKV_SAMPLING_NUMBERS(CKV_SAMPLING_FLAG)
#undef CKV_SAMPLING_FLAG
ABSL_FLAG(std::vector<std::string>, stop, {}, "generate: stop strings");
ABSL_FLAG(std::string, backend, "auto",
          "compute backend: auto|cpu|cuda|fake (auto: the best one this "
          "build has; fake: the device backend on the fake device, for "
          "tests; cuda is not built yet)");
ABSL_FLAG(int, threads, 0, "worker threads (0 = all cores)");
ABSL_FLAG(int, prefill_chunk, 256, "tokens per prefill step");
ABSL_FLAG(std::string, kernels, "auto",
          "CPU kernels: auto|scalar|avx2|avx512|avx512_bf16 (scalar: the "
          "reference path)");
ABSL_FLAG(std::string, kv_type, "f16", "KV cache type: f32|f16|bf16");
ABSL_FLAG(int64_t, max_context, 131072, "KV cache capacity in tokens");
ABSL_FLAG(std::string, out, "", "make-random: output GGUF path");
ABSL_FLAG(int, layers, 2, "make-random: layers");
ABSL_FLAG(int, dim, 256, "make-random: model dimension");
ABSL_FLAG(int, heads, 8, "make-random: query heads");
ABSL_FLAG(int, kv_heads, 2, "make-random: KV heads");
ABSL_FLAG(int, ffn, 704, "make-random: feed-forward dimension");
ABSL_FLAG(std::string, vocab, "byte",
          "make-random: byte | byte-chatml | VOCAB.gguf");
ABSL_FLAG(std::string, chat_template, "",
          "make-random: tokenizer.chat_template to embed: chatml (the "
          "built-in one for --vocab byte-chatml) or a Jinja file");
ABSL_FLAG(std::string, dtype, "f16",
          "make-random: f32|f16|bf16|q4_0|q4_1|q5_0|q5_1|q8_0|q2_k|q3_k|q4_k|"
          "q5_k|q6_k|iq4_nl|iq4_xs, or the mixes q4_k_m|q5_k_m");
ABSL_FLAG(bool, rope_freqs, false, "make-random: add rope_freqs.weight");
ABSL_FLAG(std::string, arch, "llama",
          "make-random: llama|qwen2|qwen3|phi3|gemma2|gemma3|chatglm|glm4");
ABSL_FLAG(bool, tied, false, "make-random: tie output to token_embd");
// KV store: the settings of the schema (common/settings_schema.h), defaults
// from KvStoreConfig except --policy (full: a dense cache).
namespace {
const ckv::KvStoreConfig kKv;
}  // namespace
ABSL_FLAG(std::string, policy, "full",
          ckv::JoinPolicyNames("|", /*with_evaluation_only=*/true));
ABSL_FLAG(std::string, gqa_selection, ckv::GqaSelectionName(kKv.gqa_selection),
          ckv::settings::KvSettingHelp("gqa_selection"));
#define CKV_KV_FLAG(name, type, range, fork, help) \
  ABSL_FLAG(type, name, kKv.name, help);
CKV_KV_WIRE_NUMBERS(CKV_KV_FLAG)
#undef CKV_KV_FLAG
ABSL_FLAG(int, kmeans_max_iters, kKv.kmeans_max_iters,
          ckv::settings::KvSettingHelp("kmeans_max_iters"));
ABSL_FLAG(uint64_t, cluster_seed, kKv.seed,
          ckv::settings::KvSettingHelp("seed"));
ABSL_FLAG(std::string, cluster_metric, ckv::ClusterMetricName(kKv.metric),
          ckv::settings::KvSettingHelp("metric"));
ABSL_FLAG(bool, async_clustering, kKv.async_clustering,
          ckv::settings::KvSettingHelp("async_clustering"));
ABSL_FLAG(std::string, cache_mode, ckv::CacheModeName(kKv.cache_mode),
          ckv::settings::KvSettingHelp("cache_mode"));

namespace ckv {
namespace {

// f32|f16|bf16, and with `allow_blocks` every block type (q4_0 ... iq4_xs).
absl::StatusOr<kernels::DType> ParseDType(const std::string& s,
                                          bool allow_blocks) {
  kernels::DType t;
  if (kernels::ParseDTypeName(s.c_str(), &t) &&
      (allow_blocks || !kernels::IsQuantized(t))) {
    return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown type '", s, "'"));
}

absl::Status ReadKvFlags(CliOptions& o) {
  KvStoreConfig& c = o.kv;
  auto policy = ParseKvPolicy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) return policy.status();
  c.policy = *policy;
  auto gqa = ParseGqaSelection(absl::GetFlag(FLAGS_gqa_selection));
  if (!gqa.ok()) return gqa.status();
  c.gqa_selection = *gqa;
  auto metric = ParseClusterMetric(absl::GetFlag(FLAGS_cluster_metric));
  if (!metric.ok()) return metric.status();
  c.metric = *metric;
  auto mode = ParseCacheMode(absl::GetFlag(FLAGS_cache_mode));
  if (!mode.ok()) return mode.status();
  c.cache_mode = *mode;
#define CKV_READ(name, ...) c.name = absl::GetFlag(FLAGS_##name);
  CKV_KV_WIRE_NUMBERS(CKV_READ)
#undef CKV_READ
  c.kmeans_max_iters = absl::GetFlag(FLAGS_kmeans_max_iters);
  c.seed = absl::GetFlag(FLAGS_cluster_seed);
  c.async_clustering = absl::GetFlag(FLAGS_async_clustering);
  c.max_tokens = o.max_context;
  // The host tier is F16 or BF16; an F32 request keeps F16 there.
  c.kv_dtype = o.kv_type == kernels::DType::kBF16 ? kernels::DType::kBF16
                                                  : kernels::DType::kF16;
  return ValidateKvStoreConfig(c);
}

// --chat-template: "chatml" or the path of a Jinja file.
absl::Status ReadChatTemplateFlag(RandomModelSpec& spec) {
  const std::string value = absl::GetFlag(FLAGS_chat_template);
  if (value.empty()) return absl::OkStatus();
  if (value == "chatml") {
    spec.chat_template = kChatMlTemplate;
    return absl::OkStatus();
  }
  std::ifstream in(value, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("--chat-template: cannot read '", value, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  spec.chat_template = ss.str();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CliOptions> CliOptionsFromFlags() {
  CliOptions o;
  o.text_file = absl::GetFlag(FLAGS_text_file);
  o.bos = absl::GetFlag(FLAGS_bos);
  o.parse_special = absl::GetFlag(FLAGS_parse_special);
  o.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  o.positions = absl::GetFlag(FLAGS_positions);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.prompt_file = absl::GetFlag(FLAGS_prompt_file);
  o.out = absl::GetFlag(FLAGS_out);
  o.max_context = absl::GetFlag(FLAGS_max_context);
  auto kv = ParseDType(absl::GetFlag(FLAGS_kv_type), false);
  if (!kv.ok()) return kv.status();
  o.kv_type = *kv;
#define CKV_READ(name, ...) o.sampling.name = absl::GetFlag(FLAGS_##name);
  CKV_SAMPLING_NUMBERS(CKV_READ)
#undef CKV_READ
  o.sampling.stop = absl::GetFlag(FLAGS_stop);
  if (auto s = ValidateSamplingParams(o.sampling); !s.ok()) return s;
  auto backend = ParseBackendFlag(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  o.backend = *backend;
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  o.transformer.threads = threads;
  o.transformer.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (o.transformer.prefill_chunk <= 0) {
    return absl::InvalidArgumentError("--prefill_chunk must be > 0");
  }
  o.random.layers = absl::GetFlag(FLAGS_layers);
  o.random.dim = absl::GetFlag(FLAGS_dim);
  o.random.heads = absl::GetFlag(FLAGS_heads);
  o.random.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  o.random.ffn = absl::GetFlag(FLAGS_ffn);
  o.random.vocab = absl::GetFlag(FLAGS_vocab);
  if (auto s = ReadChatTemplateFlag(o.random); !s.ok()) return s;
  o.random.seed = o.sampling.seed;
  o.random.rope_freqs = absl::GetFlag(FLAGS_rope_freqs);
  o.random.arch = absl::GetFlag(FLAGS_arch);
  o.random.tied_embeddings = absl::GetFlag(FLAGS_tied);
  if (auto s = ReadKvFlags(o); !s.ok()) return s;
  if (!ParseRandomDType(absl::GetFlag(FLAGS_dtype), &o.random)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown type '", absl::GetFlag(FLAGS_dtype), "'"));
  }
  o.kernels = absl::GetFlag(FLAGS_kernels);
  if (!kernels::cpu::IsKernelSetName(o.kernels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernels must be one of ", kernels::cpu::kKernelSetNames));
  }
  return o;
}

absl::StatusOr<std::unique_ptr<Transformer>> NewToolTransformer(
    const ModelConfig& config, const ModelWeights& weights,
    const CliOptions& o) {
  auto tf = NewTransformer(config, weights, o.transformer, o.backend);
  if (tf.ok() && o.backend != BackendKind::kCpu) {  // auto, fake: say which
    std::fprintf(stderr, "backend %s: %s (%s)\n", BackendKindName(o.backend),
                 (*tf)->backend().info().name.c_str(),
                 (*tf)->backend().info().device.c_str());
  }
  return tf;
}

}  // namespace ckv
