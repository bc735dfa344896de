// Golden tests against llama.cpp: logits at the listed positions and greedy
// continuations for the fixture models (see tests/fixtures/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "model/generation.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

struct GoldenCase {
  std::string model;   // file under models/
  std::string prompt;  // json file under models/
  double tolerance;    // max |diff| relative to the row's spread
};

// Tolerances from the fixtures' README: llama.cpp rounds activations to F16
// inside F16 matmuls, so the F16 model agrees only to about 1e-2.
const GoldenCase kCases[] = {
    {"tiny-a-f32.gguf", "tiny-a-f32.p64.json", 1e-3},
    {"tiny-a-f32.gguf", "tiny-a-f32.p1500.json", 1e-3},
    {"tiny-b-f16.gguf", "tiny-b-f16.p64.json", 1e-2},
    {"tiny-b-f16.gguf", "tiny-b-f16.p1500.json", 1e-2},
    {"tiny-b-f16.gguf", "tiny-b-f16.p3000.json", 1e-2},
};

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST_P(GoldenTest, LogitsAndGreedyMatchLlamaCpp) {
  ASSERT_TRUE(testing::HaveFixtures())
      << "fixtures missing at " << testing::FixturesDir();
  const GoldenCase& gc = GetParam();
  const std::string dir = testing::FixturesDir() + "/models/";
  auto model = LoadModel(dir + gc.model);
  ASSERT_TRUE(model.ok()) << model.status();
  const nlohmann::json golden = ReadJson(dir + gc.prompt);
  const auto prompt = golden["prompt"].get<std::vector<int32_t>>();
  const auto positions = golden["logit_positions"].get<std::vector<int>>();
  const int vocab = golden["n_vocab"].get<int>();
  const Model& m = **model;
  ASSERT_EQ(vocab, m.config.vocab_size);

  // The fixtures were computed with an F32 KV cache.
  TransformerOptions opt;
  opt.threads = 2;
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, kernels::DType::kF32, 8192));
  std::vector<float> logits;
  SequenceInput in{prompt, &cache, LogitsMode::kAll, &logits};
  ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());

  double worst = 0.0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto want = golden["logits"][i].get<std::vector<float>>();
    const float* got = &logits[static_cast<size_t>(positions[i]) * vocab];
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    const double spread = *hi - *lo;
    for (int v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(got[v] - want[v]) / spread);
    }
  }
  EXPECT_LE(worst, gc.tolerance) << "worst relative logit error";
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("%s: worst relative logit error %.2e\n", gc.prompt.c_str(), worst);

  // Greedy continuation, one token at a time.
  const auto greedy = golden["greedy"].get<std::vector<int32_t>>();
  std::vector<int32_t> got;
  std::vector<float> step_logits(logits.end() - vocab, logits.end());
  for (size_t i = 0; i < greedy.size(); ++i) {
    got.push_back(ArgMax(step_logits));
    const int32_t next[1] = {got.back()};
    SequenceInput s{next, &cache, LogitsMode::kLast, &step_logits};
    ASSERT_TRUE(tf.Forward(absl::MakeSpan(&s, 1)).ok());
  }
  EXPECT_EQ(got, greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string n = info.param.prompt;
                           std::replace_if(
                               n.begin(), n.end(),
                               [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace ckv
