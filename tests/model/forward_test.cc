// Properties of the forward pass that hold for any model: chunking, batching
// and threading do not change results; bad input is refused up front.
#include <gtest/gtest.h>

#include <cmath>

#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

using kernels::DType;

RandomModelSpec SmallSpec(const std::string& arch = "llama") {
  RandomModelSpec s;
  s.layers = 2;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 96;
  s.dtype = DType::kF32;
  s.arch = arch;
  return s;
}

std::unique_ptr<Model> Load(const std::string& name,
                            const RandomModelSpec& spec) {
  auto m = LoadModel(testing::RandomModelPath(name, spec));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Tokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + salt * 11 + 5) % vocab;
  return t;
}

// All-position logits of `tokens` evaluated with the given options.
std::vector<float> AllLogits(const Model& m, const std::vector<int32_t>& tokens,
                             TransformerOptions opt,
                             DType kv = DType::kF32) {
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, kv, 1 << 16));
  std::vector<float> logits;
  SequenceInput in{tokens, &cache, LogitsMode::kAll, &logits};
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  return logits;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return d;
}

TEST(Forward, ChunkSizeAndThreadsDoNotChangeLogits) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  const auto tokens = Tokens(301, m->config.vocab_size);
  const auto base = AllLogits(*m, tokens, {1, 512});
  EXPECT_LT(MaxAbsDiff(base, AllLogits(*m, tokens, {1, 7})), 1e-4);
  EXPECT_LT(MaxAbsDiff(base, AllLogits(*m, tokens, {3, 64})), 1e-4);
}

TEST(Forward, IncrementalDecodeEqualsOneShot) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  const int vocab = m->config.vocab_size;
  const auto tokens = Tokens(40, vocab);
  const auto base = AllLogits(*m, tokens, {2, 256});
  Transformer tf(m->config, m->weights, {2, 256});
  DenseKvCache cache(DenseCacheOptions(m->config, DType::kF32, 1024));
  std::vector<float> row;
  for (size_t i = 0; i < tokens.size(); ++i) {
    SequenceInput in{absl::MakeConstSpan(&tokens[i], 1), &cache,
                     LogitsMode::kLast, &row};
    ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
    for (int v = 0; v < vocab; ++v) {
      ASSERT_NEAR(row[v], base[i * vocab + v], 1e-4) << "token " << i;
    }
  }
  EXPECT_EQ(cache.num_tokens(), 40);
}

TEST(Forward, BatchOfSequencesEqualsSeparateRuns) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  const int vocab = m->config.vocab_size;
  const auto a = Tokens(50, vocab, 1), b = Tokens(23, vocab, 2);
  Transformer tf(m->config, m->weights, {2, 32});
  DenseKvCache ca(DenseCacheOptions(m->config, DType::kF32, 1024));
  DenseKvCache cb(DenseCacheOptions(m->config, DType::kF32, 1024));
  std::vector<float> la, lb;
  SequenceInput batch[2] = {{a, &ca, LogitsMode::kAll, &la},
                            {b, &cb, LogitsMode::kLast, &lb}};
  ASSERT_TRUE(tf.Forward(absl::MakeSpan(batch, 2)).ok());
  EXPECT_LT(MaxAbsDiff(la, AllLogits(*m, a, {1, 256})), 1e-4);
  const auto all_b = AllLogits(*m, b, {1, 256});
  EXPECT_LT(MaxAbsDiff(lb, std::vector<float>(all_b.end() - vocab,
                                              all_b.end())),
            1e-4);
}

TEST(Forward, F16AndBf16KvCachesStayClose) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  const auto tokens = Tokens(100, m->config.vocab_size);
  const auto base = AllLogits(*m, tokens, {1, 64});
  EXPECT_LT(MaxAbsDiff(base, AllLogits(*m, tokens, {1, 64}, DType::kF16)),
            2e-2);
  EXPECT_LT(MaxAbsDiff(base, AllLogits(*m, tokens, {1, 64}, DType::kBF16)),
            1e-1);
}

TEST(Forward, RejectsOutOfRangeTokensWithoutTouchingTheCache) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  Transformer tf(m->config, m->weights, {1, 64});
  DenseKvCache cache(DenseCacheOptions(m->config, DType::kF32, 64));
  std::vector<float> logits;
  const std::vector<int32_t> bad = {1, 2, m->config.vocab_size};
  SequenceInput in{bad, &cache, LogitsMode::kLast, &logits};
  const absl::Status s = tf.Forward(absl::MakeSpan(&in, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(cache.num_tokens(), 0);
  const std::vector<int32_t> neg = {-1};
  in.tokens = neg;
  EXPECT_EQ(tf.Forward(absl::MakeSpan(&in, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  in.tokens = {};
  EXPECT_EQ(tf.Forward(absl::MakeSpan(&in, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Forward, CacheCapacityIsEnforcedBeforeWork) {
  auto m = Load("small", SmallSpec());
  ASSERT_NE(m, nullptr);
  Transformer tf(m->config, m->weights, {1, 64});
  DenseKvCache cache(DenseCacheOptions(m->config, DType::kF32, 10));
  std::vector<float> logits;
  const auto tokens = Tokens(8, m->config.vocab_size);
  SequenceInput in{tokens, &cache, LogitsMode::kLast, &logits};
  ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  const absl::Status s = tf.Forward(absl::MakeSpan(&in, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.num_tokens(), 8);
}

TEST(Forward, Qwen2BiasesAndTiedEmbeddingsAreUsed) {
  auto qwen = Load("qwen2", SmallSpec("qwen2"));
  ASSERT_NE(qwen, nullptr);
  EXPECT_TRUE(qwen->config.qkv_bias);
  EXPECT_EQ(qwen->config.rope_style, RopeStyle::kNeox);
  const auto tokens = Tokens(30, qwen->config.vocab_size);
  const auto with_bias = AllLogits(*qwen, tokens, {1, 64});
  for (auto& l : qwen->weights.layers) {
    std::fill(l.bq.begin(), l.bq.end(), 0.0f);
  }
  EXPECT_GT(MaxAbsDiff(with_bias, AllLogits(*qwen, tokens, {1, 64})), 1e-3);

  RandomModelSpec tied = SmallSpec();
  tied.tied_embeddings = true;
  auto t = Load("tied", tied);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->config.tied_embeddings);
  EXPECT_EQ(t->weights.output.data, t->weights.token_embd.data);
}

TEST(Forward, AllWeightTypesLoadAndAgreeRoughly) {
  std::vector<float> base;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    RandomModelSpec s = SmallSpec();
    s.dtype = t;
    auto m = Load(std::string("dtype_") + kernels::DTypeName(t), s);
    ASSERT_NE(m, nullptr);
    const auto logits = AllLogits(*m, Tokens(20, m->config.vocab_size),
                                  {1, 64});
    if (base.empty()) base = logits;
    // Same seed, same random values: only rounding of the weights differs.
    EXPECT_LT(MaxAbsDiff(base, logits), 0.25) << kernels::DTypeName(t);
  }
}

}  // namespace
}  // namespace ckv
