// Golden tests of the quantised fixture models (tests/fixtures/models/quant,
// README there). The reference path (scalar kernels: exact dequantisation,
// F32 activations) must match the float64 forward over dequantised weights
// within 1e-3 of the row spread. The fast path (8-bit activations, integer
// dot products) is checked end to end against llama.cpp's logits, which
// quantise activations too, with a loose bound; its kernels are checked op
// by op against the reference in tests/kernels/quant_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "kernels/cpu/kernel_set.h"
#include "model/dense_kv_cache.h"
#include "model/generation.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

const char* const kModels[] = {
    "tiny-q-q4_0",   "tiny-q-q4_1", "tiny-q-q5_0",   "tiny-q-q5_1",
    "tiny-q-q8_0",   "tiny-q-q2_k", "tiny-q-q3_k_m", "tiny-q-q4_k_m",
    "tiny-q-q5_k_m", "tiny-q-q6_k", "tiny-q-iq4_nl", "tiny-q-iq4_xs",
};

std::string QuantDir() { return testing::FixturesDir() + "/models/quant/"; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

struct Comparison {
  double worst = 0.0;  // max |got - want| / spread over listed positions
  int top1_agree = 0;  // positions whose arg-max agrees
  int positions = 0;
};

// Runs the prompt of `golden` through the model with the active kernel set
// and compares the logits at the listed positions.
Comparison RunAndCompare(const Model& m, const nlohmann::json& golden) {
  const auto prompt = golden["prompt"].get<std::vector<int32_t>>();
  const auto positions = golden["logit_positions"].get<std::vector<int>>();
  const int vocab = golden["n_vocab"].get<int>();
  EXPECT_EQ(vocab, m.config.vocab_size);
  TransformerOptions opt;
  opt.threads = 2;
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, kernels::DType::kF32, 2048));
  std::vector<float> logits;
  SequenceInput in{prompt, &cache, LogitsMode::kAll, &logits};
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  Comparison c;
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto want = golden["logits"][i].get<std::vector<float>>();
    const float* got = &logits[static_cast<size_t>(positions[i]) * vocab];
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    const double spread = *hi - *lo;
    for (int v = 0; v < vocab; ++v) {
      c.worst = std::max(c.worst, std::fabs(got[v] - want[v]) / spread);
    }
    const std::vector<float> row(got, got + vocab);
    c.top1_agree += ArgMax(row) == ArgMax(want);
    ++c.positions;
  }
  return c;
}

class QuantGoldenTest : public ::testing::TestWithParam<const char*> {
 protected:
  void TearDown() override { kernels::cpu::SetKernelsForTesting(nullptr); }
};

// Reference path vs the float64 forward over exactly dequantised weights.
TEST_P(QuantGoldenTest, ReferencePathMatchesDequantF64) {
  ASSERT_TRUE(testing::HaveFixtures()) << testing::FixturesDir();
  auto model = LoadModel(QuantDir() + GetParam() + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  kernels::cpu::SetKernelsForTesting(&kernels::cpu::ScalarKernels());
  for (const char* prompt : {"p64", "p1500"}) {
    const auto golden =
        ReadJson(QuantDir() + GetParam() + "." + prompt + ".dequant-f64.json");
    const Comparison c = RunAndCompare(**model, golden);
    std::printf("%s %s reference vs dequant-f64: worst %.2e, top-1 %d/%d\n",
                GetParam(), prompt, c.worst, c.top1_agree, c.positions);
    EXPECT_LE(c.worst, 1e-3) << prompt;
    EXPECT_EQ(c.top1_agree, c.positions) << prompt;
  }
}

// Fast path (detected kernel set) vs llama.cpp, token by token as in
// decode (one-token steps take the 8-bit integer GEMV). Both quantise
// activations, in slightly different ways; the README measures up to 0.32
// of the spread between llama.cpp and the float64 forward on p64. Measured
// here (AVX2): worst 1e-6 (Q4_K_M and IQ4_XS: their dots quantise
// activations per 256 as llama.cpp does) to 0.028 (Q4_1), arg-max agreeing
// at 60-64 of 64 positions; bounds 0.15 and 7/8.
TEST_P(QuantGoldenTest, FastDecodeNearLlamaCpp) {
  ASSERT_TRUE(testing::HaveFixtures()) << testing::FixturesDir();
  auto model = LoadModel(QuantDir() + GetParam() + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const auto golden = ReadJson(QuantDir() + GetParam() + ".p64.json");
  const auto prompt = golden["prompt"].get<std::vector<int32_t>>();
  const int vocab = golden["n_vocab"].get<int>();
  ASSERT_EQ(golden["logit_positions"].size(), prompt.size());
  TransformerOptions opt;
  opt.threads = 2;
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, kernels::DType::kF32, 128));
  double worst = 0.0;
  int agree = 0;
  std::vector<float> logits;
  for (size_t p = 0; p < prompt.size(); ++p) {
    SequenceInput in{absl::MakeConstSpan(&prompt[p], 1), &cache,
                     LogitsMode::kLast, &logits};
    ASSERT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
    const auto want = golden["logits"][p].get<std::vector<float>>();
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    for (int v = 0; v < vocab; ++v) {
      worst =
          std::max<double>(worst, std::fabs(logits[v] - want[v]) / (*hi - *lo));
    }
    agree += ArgMax(logits) == ArgMax(want);
  }
  std::printf("%s p64 decode (%s) vs llama.cpp: worst %.2e, top-1 %d/%zu\n",
              GetParam(), kernels::cpu::ActiveKernels().name, worst, agree,
              prompt.size());
  EXPECT_LE(worst, 0.15);
  EXPECT_GE(agree, static_cast<int>(prompt.size()) * 7 / 8);
}

// True when the active kernel table multiplies many tokens by one of the
// model's matrices on the 8-bit integer dots (KernelSet::
// quant_gemv_batches), so that prefill carries decode's activation rounding.
bool PrefillOnIntegerDots(const Model& m) {
  const auto& ks = kernels::cpu::ActiveKernels();
  if (ks.quant_gemv_batches == nullptr) return false;
  bool any = ks.quant_gemv_batches(m.weights.output.type);
  for (const auto& l : m.weights.layers) {
    for (const Matrix* w :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      any = any || ks.quant_gemv_batches(w->type);
    }
  }
  return any;
}

// The fast prefill matches the float64 reference as tightly as the
// reference path where it multiplies F32 activations (GEMM over dequantised
// weights). Where the active table runs a type's prefill on the integer
// dots (AVX-512 VNNI: Q4_K, Q5_K, Q6_K), the prefill is held to decode's
// bounds against llama.cpp instead (FastDecodeNearLlamaCpp; measured on a
// Zen 4: worst 8.6e-3 (Q5_K_M) .. 5.7e-2 (Q2_K) of the spread, arg-max
// agreeing at 57-63 of 64 positions), and
// the exact GEMM is checked with the AVX2 table, which has no such path.
TEST_P(QuantGoldenTest, FastPrefillMatchesDequantF64) {
  ASSERT_TRUE(testing::HaveFixtures()) << testing::FixturesDir();
  auto model = LoadModel(QuantDir() + GetParam() + ".gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  if (PrefillOnIntegerDots(m)) {
    const auto golden = ReadJson(QuantDir() + GetParam() + ".p64.json");
    const Comparison c = RunAndCompare(m, golden);
    std::printf("%s p64 prefill (%s, integer dots) vs llama.cpp: worst "
                "%.2e, top-1 %d/%d\n",
                GetParam(), kernels::cpu::ActiveKernels().name, c.worst,
                c.top1_agree, c.positions);
    EXPECT_LE(c.worst, 0.15);
    EXPECT_GE(c.top1_agree, c.positions * 7 / 8);
    ASSERT_NE(kernels::cpu::Avx2Kernels(), nullptr);
    kernels::cpu::SetKernelsForTesting(kernels::cpu::Avx2Kernels());
  }
  const auto golden =
      ReadJson(QuantDir() + GetParam() + ".p64.dequant-f64.json");
  const Comparison c = RunAndCompare(m, golden);
  EXPECT_LE(c.worst, 1e-3);
  EXPECT_EQ(c.top1_agree, c.positions);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantGoldenTest,
                         ::testing::ValuesIn(kModels), [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace ckv
