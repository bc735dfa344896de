// The sampler's constraint hook: every mode samples only allowed tokens,
// the output is a sentence of the grammar, and generation ends with an
// end-of-generation token once the grammar is complete.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/recognizer.h"
#include "model/sampler.h"
#include "tests/grammar/test_vocab.h"

namespace ckv::grammar {
namespace {

struct Output {
  std::string text;
  bool ended = false;  // an end-of-generation token was sampled
};

Output Generate(SamplingParams p, const TokenIndex& v, uint32_t seed,
                int max_tokens) {
  Sampler sampler(p);
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(v.vocab_size());
  Output run;
  for (int step = 0; step < max_tokens; ++step) {
    for (float& l : logits) l = noise(rng);
    const int32_t t = sampler.Sample(logits);
    if (v.IsEog(t)) {
      run.ended = true;
      break;
    }
    run.text += v.bytes(t);
    sampler.Accept(t);
  }
  return run;
}

bool IsSentence(const Grammar& g, const std::string& text) {
  auto shared = std::make_shared<Grammar>(g);
  Recognizer rec(shared, {});
  auto s = rec.Start();
  for (unsigned char b : text) {
    s = rec.Step(s, b);
    if (s == Recognizer::kDead) return false;
  }
  return rec.Accepting(s);
}

TEST(SamplerConstraint, EveryModeFollowsTheGrammarAndEnds) {
  auto tok = testing::DemoTokenizer();
  ASSERT_NE(tok, nullptr) << "models/kjv-llama.gguf is missing";
  auto vocab = TokenIndex::For(*tok);
  const std::string gbnf =
      R"g(root ::= "(" [a-z ]{1,12} ")" ( ", " [0-9]{1,3} ){0,3})g";
  auto c = CompileConstraint({ConstraintSpec::kGbnf, gbnf}, vocab);
  ASSERT_TRUE(c.ok()) << c.status();
  SamplingParams greedy;
  greedy.constraint = *c;
  SamplingParams topk = greedy;
  topk.temperature = 1.0f;
  topk.top_k = 5;
  SamplingParams full = greedy;
  full.temperature = 1.5f;
  full.top_k = 0;
  full.top_p = 1.0f;
  SamplingParams minp = greedy;
  minp.temperature = 0.7f;
  minp.min_p = 0.05f;
  minp.top_p = 0.9f;
  minp.repetition_penalty = 1.3f;
  minp.logit_bias = {{static_cast<int32_t>(vocab->eog_ids()[0]), 100.0f}};
  int n = 0;
  for (const SamplingParams* p : {&greedy, &topk, &full, &minp}) {
    for (uint32_t seed = 0; seed < 5; ++seed) {
      SamplingParams q = *p;
      q.seed = seed;
      ASSERT_TRUE(ValidateSamplingParams(q, tok->vocab_size()).ok());
      const Output r = Generate(q, *vocab, seed, 200);
      EXPECT_TRUE(r.ended) << r.text;
      EXPECT_TRUE(IsSentence(*(*c)->grammar, r.text)) << r.text;
      ++n;
    }
  }
  EXPECT_EQ(n, 20);
}

TEST(SamplerConstraint, WithoutTheConstraintOutputsDoNotFollowIt) {
  // The check above can fail: unconstrained random sampling of the same
  // vocabulary does not produce the grammar's sentences.
  auto tok = testing::DemoTokenizer();
  ASSERT_NE(tok, nullptr);
  auto vocab = TokenIndex::For(*tok);
  auto g = CompileGbnf(R"g(root ::= "(" [a-z ]{1,12} ")")g");
  ASSERT_TRUE(g.ok());
  SamplingParams p;
  p.temperature = 1.0f;
  const Output r = Generate(p, *vocab, 1, 8);
  EXPECT_FALSE(IsSentence(**g, r.text)) << r.text;
}

TEST(SamplerConstraint, IgnoreEosIsRejected) {
  auto vocab = testing::SyntheticIndex(0, 1);
  auto c = CompileConstraint({ConstraintSpec::kJsonObject, ""}, vocab);
  ASSERT_TRUE(c.ok());
  SamplingParams p;
  p.constraint = *c;
  p.ignore_eos = true;
  const absl::Status s = ValidateSamplingParams(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ignore_eos"), std::string::npos);
  p.ignore_eos = false;
  EXPECT_TRUE(ValidateSamplingParams(p, vocab->vocab_size()).ok());
  EXPECT_FALSE(ValidateSamplingParams(p, 10).ok());  // vocabulary too small
}

}  // namespace
}  // namespace ckv::grammar
