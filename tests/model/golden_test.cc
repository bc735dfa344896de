// Golden tests against llama.cpp: logits at the listed positions and greedy
// continuations for the fixture models (see tests/fixtures/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_set.h"
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

// The forward of a golden case under the active kernel table: the worst
// logit error relative to the row's spread over the golden positions, and
// the greedy continuation (one token per step after the prompt).
struct GoldenRun {
  double worst = 0.0;
  std::vector<int32_t> greedy, want_greedy;
};

void RunGolden(const GoldenCase& gc, GoldenRun* out) {
  ASSERT_TRUE(testing::HaveFixtures())
      << "fixtures missing at " << testing::FixturesDir();
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

  for (size_t i = 0; i < positions.size(); ++i) {
    const auto want = golden["logits"][i].get<std::vector<float>>();
    const float* got = &logits[static_cast<size_t>(positions[i]) * vocab];
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    const double spread = *hi - *lo;
    for (int v = 0; v < vocab; ++v) {
      out->worst = std::max(out->worst, std::fabs(got[v] - want[v]) / spread);
    }
  }
  out->want_greedy = golden["greedy"].get<std::vector<int32_t>>();
  std::vector<float> step_logits(logits.end() - vocab, logits.end());
  for (size_t i = 0; i < out->want_greedy.size(); ++i) {
    out->greedy.push_back(ArgMax(step_logits));
    const int32_t next[1] = {out->greedy.back()};
    SequenceInput s{next, &cache, LogitsMode::kLast, &step_logits};
    ASSERT_TRUE(tf.Forward(absl::MakeSpan(&s, 1)).ok());
  }
}

TEST_P(GoldenTest, LogitsAndGreedyMatchLlamaCpp) {
  const GoldenCase& gc = GetParam();
  GoldenRun run;
  ASSERT_NO_FATAL_FAILURE(RunGolden(gc, &run));
  EXPECT_LE(run.worst, gc.tolerance) << "worst relative logit error";
  RecordProperty("worst_relative_error", std::to_string(run.worst));
  std::printf("%s: worst relative logit error %.2e\n", gc.prompt.c_str(),
              run.worst);
  EXPECT_EQ(run.greedy, run.want_greedy);
}

// The opt-in BF16 prefill (--kernels avx512_bf16) rounds every prefill
// GEMM and attention-tile operand to BF16 (up to 2^-8 per product).
// With its BF16 attention tiles too, measured (2026-12-06, Zen 4): worst
// 5.1e-3 .. 1.29e-2 of the spread
// (F32 tables: 2e-6 .. 5.3e-4). Stated bound: 2e-2. The random tiny models
// have near-tied logits, so a greedy continuation may leave llama.cpp's
// after a few tokens (tiny-b p1500: after 2, p64: after 31): only the
// first greedy token is asserted. Skips on CPUs without AVX512_BF16.
constexpr double kBf16PrefillTolerance = 2e-2;

TEST_P(GoldenTest, Bf16PrefillStaysNearLlamaCpp) {
  const kernels::cpu::CpuFeatures& f = kernels::cpu::GetCpuFeatures();
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16)) {
    GTEST_SKIP() << "no AVX512_BF16 on this CPU: "
                 << kernels::cpu::DescribeCpuFeatures();
  }
  struct Scoped {
    Scoped() {
      kernels::cpu::SetKernelsForTesting(kernels::cpu::Avx512Bf16Kernels());
    }
    ~Scoped() { kernels::cpu::SetKernelsForTesting(nullptr); }
  } scoped;
  const GoldenCase& gc = GetParam();
  GoldenRun run;
  ASSERT_NO_FATAL_FAILURE(RunGolden(gc, &run));
  std::printf("%s (avx512_bf16): worst relative logit error %.2e\n",
              gc.prompt.c_str(), run.worst);
  EXPECT_LE(run.worst, kBf16PrefillTolerance);
  ASSERT_FALSE(run.want_greedy.empty());
  EXPECT_EQ(run.greedy[0], run.want_greedy[0]);
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
