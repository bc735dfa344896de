// model/generation.h Generate (the `clusterkv-model generate` path): on
// return the cache holds the prompt and every generated token, the last one
// included, stored exactly as a step-by-step reference stores them, for
// every policy and both GQA selection modes.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/generation.h"
#include "model/model.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

const Model& TestModel() {
  static const Model* m = [] {
    RandomModelSpec s;
    s.layers = 3;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    s.seed = 5;
    auto model = LoadModel(testing::RandomModelPath("generation", s));
    if (!model.ok()) std::abort();
    return model->release();
  }();
  return *m;
}

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 37 + 11) % 250;
  return t;
}

class GenerationTest
    : public ::testing::TestWithParam<std::tuple<KvPolicy, GqaSelection>> {
 protected:
  KvStoreConfig Kv() const {
    KvStoreConfig kv;
    kv.policy = std::get<0>(GetParam());
    kv.gqa_selection = std::get<1>(GetParam());
    kv.budget = 16;
    kv.sink_tokens = 4;
    kv.tokens_per_cluster = 8;
    kv.window = 16;  // the generated tokens close segments
    kv.dense_layers = 1;
    return kv;
  }
  std::unique_ptr<KvCache> NewCache() {
    return NewKvCache(TestModel().config, Kv(), kernels::DType::kF16, &worker_);
  }
  absl::StatusOr<GenerationResult> Run(KvCache& cache,
                                       const std::vector<int32_t>& prompt,
                                       int n) {
    SamplingParams p;
    p.max_tokens = n;
    p.ignore_eos = true;
    return Generate(tf_, *TestModel().tokenizer, cache, prompt, p,
                    [](absl::string_view) { return true; });
  }
  // Logits after appending `token` as a decode step.
  std::vector<float> Step(KvCache& cache, int32_t token) {
    std::vector<float> logits;
    const int32_t ids[1] = {token};
    SequenceInput in = MakeInput(ids, &cache, LogitsMode::kLast, &logits,
                                 AppendKind::kGenerated);
    EXPECT_TRUE(tf_.Forward(absl::MakeSpan(&in, 1)).ok());
    return logits;
  }

  ClusterWorker worker_;
  Transformer tf_{TestModel().config, TestModel().weights, {1, 32}};
};

TEST_P(GenerationTest, CacheHoldsEveryGeneratedToken) {
  const std::vector<int32_t> prompt = Prompt(70);
  constexpr int kN = 30;
  auto whole_cache = NewCache();
  auto whole = Run(*whole_cache, prompt, kN);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->tokens.size(), size_t{kN});
  EXPECT_EQ(whole_cache->num_tokens(), 70 + kN);
  for (int a : {1, 9, kN - 1}) {
    auto cache = NewCache();
    auto part = Run(*cache, prompt, a);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(cache->num_tokens(), 70 + a) << "after " << a << " tokens";
    EXPECT_EQ(part->tokens, std::vector<int32_t>(whole->tokens.begin(),
                                                 whole->tokens.begin() + a));
    // Reference: the prompt, then each generated token as a decode step.
    auto ref = NewCache();
    std::vector<float> logits;
    SequenceInput in = MakeInput(prompt, ref.get(), LogitsMode::kLast, &logits);
    ASSERT_TRUE(tf_.Forward(absl::MakeSpan(&in, 1)).ok());
    for (int32_t t : part->tokens) logits = Step(*ref, t);
    ASSERT_EQ(ref->num_tokens(), cache->num_tokens());
    // The next decode step sees the same KV: bitwise equal logits, and the
    // greedy token the uninterrupted run chose there.
    const std::vector<float> next = Step(*cache, whole->tokens[a]);
    EXPECT_EQ(next, Step(*ref, whole->tokens[a])) << "split at " << a;
    if (a + 1 < kN) {
      EXPECT_EQ(ArgMax(next), whole->tokens[a + 1]);
    }
  }
}

TEST_P(GenerationTest, SecondCallAppendsAfterTheFirstOnesLastToken) {
  const std::vector<int32_t> prompt = Prompt(40), question = Prompt(5);
  auto cache = NewCache();
  auto first = Run(*cache, prompt, 6);
  ASSERT_TRUE(first.ok());
  auto second = Run(*cache, question, 4);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(cache->num_tokens(), 40 + 6 + 5 + 4);
}

INSTANTIATE_TEST_SUITE_P(
    PoliciesAndGqaModes, GenerationTest,
    ::testing::Combine(::testing::Values(KvPolicy::kFull, KvPolicy::kClusterKv,
                                         KvPolicy::kQuest,
                                         KvPolicy::kStreaming),
                       ::testing::Values(GqaSelection::kPerQueryHead,
                                         GqaSelection::kPerKvHead)),
    [](const auto& info) {
      return absl::StrCat(KvPolicyName(std::get<0>(info.param)), "_",
                          GqaSelectionName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace ckv
