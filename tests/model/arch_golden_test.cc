// Golden tests of the architectures beyond llama against llama.cpp: logits
// at the listed positions and greedy continuations of the random-weight
// models in fixtures/models/arch/ (see its README for how they were made).
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

struct ArchCase {
  std::string arch;
  std::string prompt;  // json file under models/arch/
  double tolerance;    // max |diff| relative to the row's standard deviation
};

// The README's agreement: 1e-3 x row std; Gemma 2e-3, because ggml's CPU
// GELU reads an F16 table (exact tanh-GELU lands up to 1.6e-3 away).
const ArchCase kCases[] = {
    {"qwen3", "p64", 1e-3},   {"qwen3", "p1500", 1e-3},
    {"gemma2", "p64", 2e-3},  {"gemma2", "p1500", 2e-3},
    {"gemma3", "p64", 2e-3},  {"gemma3", "p1500", 2e-3},
    {"phi3", "p64", 1e-3},    {"phi3", "p1500", 1e-3},
    {"chatglm", "p64", 1e-3}, {"chatglm", "p1500", 1e-3},
    {"glm4", "p64", 1e-3},    {"glm4", "p1500", 1e-3},
};

class ArchGoldenTest : public ::testing::TestWithParam<ArchCase> {};

double RowStd(const std::vector<float>& row) {
  double mean = 0.0, sq = 0.0;
  for (float v : row) mean += v;
  mean /= row.size();
  for (float v : row) sq += (v - mean) * (v - mean);
  return std::sqrt(sq / row.size());
}

TEST_P(ArchGoldenTest, LogitsAndGreedyMatchLlamaCpp) {
  const ArchCase& ac = GetParam();
  const std::string base =
      testing::FixturesDir() + "/models/arch/tiny-" + ac.arch + "-f32";
  auto model = LoadModel(base + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  std::ifstream json_in(base + "." + ac.prompt + ".json");
  ASSERT_TRUE(json_in.good())
      << "fixture missing: " << base << "." << ac.prompt;
  const nlohmann::json golden = nlohmann::json::parse(json_in);
  const auto prompt = golden["prompt"].get<std::vector<int32_t>>();
  const auto positions = golden["logit_positions"].get<std::vector<int>>();
  const auto greedy = golden["greedy"].get<std::vector<int32_t>>();
  const int vocab = golden["n_vocab"].get<int>();
  const Model& m = **model;
  ASSERT_EQ(vocab, m.config.vocab_size);
  EXPECT_EQ(m.config.arch, ac.arch);

  // As llama.cpp was run: an F32 KV cache, a context of prompt + greedy +
  // 16 (which picks Phi-3's short RoPE factors).
  TransformerOptions opt;
  opt.threads = 2;
  opt.context_per_sequence = prompt.size() + greedy.size() + 16;
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, kernels::DType::kF32, 4096));
  std::vector<float> logits;
  SequenceInput in = MakeInput(prompt, &cache, LogitsMode::kAll, &logits);
  ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());

  double worst = 0.0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto want = golden["logits"][i].get<std::vector<float>>();
    const float* got = &logits[static_cast<size_t>(positions[i]) * vocab];
    const double std_dev = RowStd(want);
    for (int v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::fabs(got[v] - want[v]) / std_dev);
    }
  }
  EXPECT_LE(worst, ac.tolerance) << "worst logit error / row std";
  std::printf("%s %s: worst logit error %.2e x row std\n", ac.arch.c_str(),
              ac.prompt.c_str(), worst);

  std::vector<int32_t> got;
  std::vector<float> step_logits(logits.end() - vocab, logits.end());
  for (size_t i = 0; i < greedy.size(); ++i) {
    got.push_back(ArgMax(step_logits));
    const int32_t next[1] = {got.back()};
    SequenceInput s = MakeInput(next, &cache, LogitsMode::kLast, &step_logits,
                                AppendKind::kGenerated);
    ASSERT_TRUE(tf.Forward(absl::MakeSpan(&s, 1)).ok());
  }
  EXPECT_EQ(got, greedy);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ArchGoldenTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           return info.param.arch + "_" + info.param.prompt;
                         });

}  // namespace
}  // namespace ckv
