#include "model/tools/fork_command.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/kv/cluster_worker.h"
#include "model/kv/clustered_store.h"
#include "model/kv/store_env.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, forks, "",
          "generate-forks: POLICY:BUDGET,... (one fork each)");

namespace ckv {
namespace {

struct ForkSpec {
  std::string name;  // as given
  KvStoreConfig config;
};

absl::StatusOr<std::vector<ForkSpec>> ParseForks(const std::string& text,
                                                 const KvStoreConfig& base) {
  std::vector<ForkSpec> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(item, ':');
    int64_t budget = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &budget) ||
        budget < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--forks: '", item, "' is not POLICY:BUDGET (BUDGET >= 0)"));
    }
    auto policy = ParseKvPolicy(parts[0]);
    if (!policy.ok()) return policy.status();
    ForkSpec f{std::string(item), base};
    f.config.policy = *policy;
    if (budget > 0) f.config.budget = static_cast<int>(budget);
    out.push_back(std::move(f));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("generate-forks: --forks is empty");
  }
  return out;
}

// One fork's greedy continuation: `prefill` (the whole prompt, for a
// fresh cache; empty for a fork of the prefilled base) first, then from
// `first` (the token the base's logits gave, or -1: from prefill's logits)
// until an end of generation or max_tokens tokens, as Generate would.
struct ForkAnswer {
  std::vector<int32_t> tokens;
  bool eos = false;
};

absl::StatusOr<ForkAnswer> Answer(Transformer& tf, const Tokenizer& tok,
                                  KvCache& cache,
                                  absl::Span<const int32_t> prompt,
                                  bool prefill, int32_t first,
                                  const SamplingParams& params) {
  Sampler sampler(params);
  for (int32_t t : prompt) sampler.Accept(t);
  std::vector<float> logits;
  if (prefill) {
    SequenceInput in = MakeInput(prompt, &cache, LogitsMode::kLast, &logits);
    if (auto s = tf.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  }
  ForkAnswer a;
  for (int i = 0; i < params.max_tokens; ++i) {
    const int32_t token = i == 0 && first >= 0 ? first : sampler.Sample(logits);
    sampler.Accept(token);
    a.tokens.push_back(token);
    if (!params.ignore_eos && tok.IsEndOfGeneration(token)) {
      a.eos = true;
      break;
    }
    if (i + 1 == params.max_tokens) break;  // its logits are not needed
    const int32_t next[1] = {token};
    SequenceInput in = MakeInput(next, &cache, LogitsMode::kLast, &logits,
                                 AppendKind::kGenerated);
    if (auto s = tf.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  }
  return a;
}

std::string TextOf(const Tokenizer& tok, const ForkAnswer& a) {
  StreamingDetokenizer detok(tok, /*render_special=*/false);
  std::string text;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    if (a.eos && i + 1 == a.tokens.size()) break;
    text += detok.Push(a.tokens[i]);
  }
  return text + detok.Flush();
}

}  // namespace

absl::Status RunGenerateForks(const std::string& model_path,
                              const std::string& prompt, const CliOptions& o) {
  if (o.sampling.temperature > 0.0f) {
    return absl::InvalidArgumentError(
        "generate-forks is greedy: use --temperature 0");
  }
  auto forks = ParseForks(absl::GetFlag(FLAGS_forks), o.kv);
  if (!forks.ok()) return forks.status();
  auto model = LoadModel(model_path);
  if (!model.ok()) return model.status();
  const Model& m = **model;
  if (auto s = ValidateSamplingParams(o.sampling, m.tokenizer->vocab_size());
      !s.ok()) {
    return s;
  }
  auto ids = m.tokenizer->Encode(prompt, /*add_special=*/true,
                                 /*parse_special=*/true);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return absl::InvalidArgumentError("empty prompt");
  auto tf = NewToolTransformer(m.config, m.weights, o);
  if (!tf.ok()) return tf.status();
  const int64_t n = static_cast<int64_t>(ids->size());
  const int64_t chunk = std::max(1, o.transformer.prefill_chunk);
  // generate's last prefill chunk of one token selects with its policy
  // before the chunks ahead of it are committed as segments: no shared
  // state reproduces that, so such a prompt is prefilled by each fork.
  const bool shared = !(n > 1 && n % chunk == 1);
  // The base: every index built, so that each fork may plan with its own
  // policy (multi-token appends attend densely under every policy).
  KvStoreConfig base_config = (*forks)[0].config;
  base_config.build_all_indexes = true;
  ClusterWorker worker;
  const StoreEnv env = (*tf)->backend().store_env();
  ClusteredKvStore base(KvShapeOf(m.config), base_config, &worker, env);
  int32_t first = -1;
  if (shared) {
    std::vector<float> logits;
    SequenceInput in = MakeInput(*ids, &base, LogitsMode::kLast, &logits);
    if (auto s = (*tf)->Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
    for (int l = 0; l < m.config.n_layers; ++l) base.WaitForIndex(l);
    Sampler sampler(o.sampling);
    for (int32_t t : *ids) sampler.Accept(t);
    first = sampler.Sample(logits);
  }
  for (const ForkSpec& f : *forks) {
    std::unique_ptr<KvCache> cache;
    if (shared) {
      KvStoreConfig child = f.config;
      child.build_all_indexes = true;
      auto fork = base.Fork(child);
      if (!fork.ok()) return fork.status();
      cache = *std::move(fork);
    } else {
      cache = NewKvCache(m.config, f.config, o.kv_type, &worker, env);
    }
    auto a =
        Answer(**tf, *m.tokenizer, *cache, *ids, !shared, first, o.sampling);
    if (!a.ok()) return a.status();
    nlohmann::ordered_json line = {{"fork", f.name},
                                   {"text", TextOf(*m.tokenizer, *a)},
                                   {"tokens", a->tokens.size()},
                                   {"finish", a->eos ? "eos" : "length"},
                                   {"shared_prefill", shared}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace ckv
