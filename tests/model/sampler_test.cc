#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "model/generation.h"
#include "model/sampler.h"

namespace ckv {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.5f};

TEST(Sampler, GreedyTakesFirstMaximum) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(s.Sample(kLogits), 1);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.Sample(kLogits));
    sb.push_back(b.Sample(kLogits));
    sc.push_back(c.Sample(kLogits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler k1(p);
  p.top_k = 0;
  p.top_p = 1e-6f;
  Sampler tp(p);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.Sample(kLogits), 1);
    EXPECT_EQ(tp.Sample(kLogits), 1);
  }
}

TEST(Sampler, FrequenciesFollowTemperedSoftmax) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = 7;
  Sampler s(p);
  const int n = 40000;
  std::map<int, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.Sample(kLogits)];
  double z = 0.0;
  for (float l : kLogits) z += std::exp(l / 0.7);
  for (size_t t = 0; t < kLogits.size(); ++t) {
    const double want = std::exp(kLogits[t] / 0.7) / z;
    const double sigma = std::sqrt(want * (1 - want) / n);
    EXPECT_NEAR(counts[t] / double{n}, want, 5 * sigma + 1e-4) << t;
  }
}

TEST(Sampler, TopKRestrictsToBestK) {
  SamplingParams p;
  p.temperature = 10.0f;
  p.top_k = 3;
  p.top_p = 1.0f;
  Sampler s(p);
  for (int i = 0; i < 500; ++i) {
    const int t = s.Sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 4 || t == 2) << t;
  }
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(ValidateSamplingParams(p).message().find("temperature"),
            std::string::npos);
  p = {};
  p.top_p = 0.0f;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_p"),
            std::string::npos);
  p = {};
  p.stop = {""};
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

// Reference of the published definitions (llama.cpp's penalties,
// logit_bias, top-k, top-p, min-p and temperature samplers), written
// directly from them and independently of model/sampler.cc.
std::vector<float> RefProcess(const std::vector<float>& logits,
                              const std::vector<int32_t>& history,
                              const SamplingParams& p) {
  std::vector<float> out = logits;
  const size_t n = std::min<size_t>(history.size(), p.penalty_last_n);
  std::map<int32_t, int> count;
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    ++count[history[i]];
  }
  for (const auto& [id, c] : count) {
    float l = out[id];
    if (l <= 0) {
      l *= p.repetition_penalty;
    } else {
      l /= p.repetition_penalty;
    }
    out[id] = l - (c * p.frequency_penalty + p.presence_penalty);
  }
  for (const auto& [id, b] : p.logit_bias) out[id] += b;
  return out;
}

std::vector<std::pair<int32_t, double>> RefDistribution(
    const std::vector<float>& l, const SamplingParams& p) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return l[a] > l[b] || (l[a] == l[b] && a < b);
  });
  if (p.top_k > 0 && ids.size() > static_cast<size_t>(p.top_k)) {
    ids.resize(p.top_k);
  }
  auto softmax = [&](double temp) {
    std::vector<double> e;
    double z = 0;
    for (int32_t id : ids) {
      e.push_back(std::exp((l[id] - double{l[ids[0]]}) / temp));
      z += e.back();
    }
    for (double& x : e) x /= z;
    return e;
  };
  if (p.top_p < 1.0f) {
    const std::vector<double> probs = softmax(1.0);
    double cum = 0;
    size_t keep = 0;
    while (keep < ids.size() && cum < p.top_p) cum += probs[keep++];
    ids.resize(keep);
  }
  if (p.min_p > 0.0f) {
    const std::vector<double> probs = softmax(1.0);
    size_t keep = 0;
    while (keep < ids.size() && probs[keep] >= p.min_p * probs[0]) ++keep;
    ids.resize(keep);
  }
  const std::vector<double> probs = softmax(p.temperature);
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < ids.size(); ++i) out.emplace_back(ids[i], probs[i]);
  return out;
}

std::vector<double> RefLogSoftmax(const std::vector<float>& l) {
  double m = l[0];
  for (float x : l) m = std::max(m, double{x});
  double z = 0;
  for (float x : l) z += std::exp(x - m);
  std::vector<double> out;
  for (float x : l) out.push_back(x - m - std::log(z));
  return out;
}

struct RandomCase {
  std::vector<float> logits;
  std::vector<int32_t> history;
  SamplingParams params;
};

// Random logits (some repeated, for ties), a history longer or shorter than
// the window, and every sampling field drawn from its valid range.
RandomCase MakeCase(std::mt19937_64& rng, int vocab) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  RandomCase c;
  for (int i = 0; i < vocab; ++i) c.logits.push_back(normal(rng));
  if (vocab > 4) c.logits[vocab - 1] = c.logits[1];
  const int hist = static_cast<int>(rng() % 300);
  for (int i = 0; i < hist; ++i) {
    // Skewed so that some ids repeat often.
    const int32_t id = static_cast<int32_t>(rng() % (1 + rng() % vocab));
    c.history.push_back(id);
  }
  SamplingParams& p = c.params;
  p.temperature = 0.2f + 2.0f * unit(rng);
  p.top_k = static_cast<int>(rng() % 3 == 0 ? 0 : rng() % (vocab + 3));
  p.top_p = rng() % 3 == 0 ? 1.0f : 0.05f + 0.95f * unit(rng);
  p.min_p = rng() % 3 == 0 ? 0.0f : 0.3f * unit(rng);
  p.repetition_penalty = rng() % 4 == 0 ? 1.0f : 0.5f + 1.5f * unit(rng);
  p.frequency_penalty = rng() % 4 == 0 ? 0.0f : 4.0f * unit(rng) - 2.0f;
  p.presence_penalty = rng() % 4 == 0 ? 0.0f : 4.0f * unit(rng) - 2.0f;
  p.penalty_last_n = static_cast<int>(rng() % 128);
  const int biases = static_cast<int>(rng() % 6);
  for (int i = 0; i < biases; ++i) {
    p.logit_bias[static_cast<int32_t>(rng() % vocab)] =
        200.0f * unit(rng) - 100.0f;
  }
  p.seed = rng();
  p.logprobs = static_cast<int>(rng() % (kMaxLogprobs + 1));
  EXPECT_TRUE(ValidateSamplingParams(p, vocab).ok());
  return c;
}

Sampler SamplerWithHistory(const RandomCase& c) {
  Sampler s(c.params);
  for (int32_t t : c.history) s.Accept(t);
  return s;
}

// Tolerance: the reference and the sampler both compute in double from the
// same float logits; 1e-9 absolute on probabilities.
TEST(SamplerReference, DistributionMatchesOnRandomLogitsAndOddVocabs) {
  std::mt19937_64 rng(2024);
  for (int vocab : {1, 2, 3, 7, 33, 257, 1001}) {
    for (int trial = 0; trial < 40; ++trial) {
      const RandomCase c = MakeCase(rng, vocab);
      Sampler s = SamplerWithHistory(c);
      const auto got = s.Distribution(c.logits);
      const auto want =
          RefDistribution(RefProcess(c.logits, c.history, c.params), c.params);
      ASSERT_EQ(got.size(), want.size()) << "vocab " << vocab << " " << trial;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << vocab << " " << trial;
        EXPECT_NEAR(got[i].second, want[i].second, 1e-9);
      }
    }
  }
}

TEST(SamplerReference, GreedyIsArgMaxOfPenalisedBiasedLogits) {
  std::mt19937_64 rng(99);
  for (int vocab : {1, 5, 31, 513}) {
    for (int trial = 0; trial < 50; ++trial) {
      RandomCase c = MakeCase(rng, vocab);
      c.params.temperature = 0.0f;
      Sampler s = SamplerWithHistory(c);
      const std::vector<float> ref = RefProcess(c.logits, c.history, c.params);
      int32_t want = 0;
      for (int i = 1; i < vocab; ++i) {
        if (ref[i] > ref[want]) want = i;
      }
      EXPECT_EQ(s.Sample(c.logits), want) << vocab << " " << trial;
    }
  }
}

// Float outputs of a double computation: 1e-5 absolute.
TEST(SamplerReference, LogprobsAreLogSoftmaxAfterPenaltiesAndBias) {
  std::mt19937_64 rng(5);
  for (int vocab : {1, 3, 17, 129, 1000}) {
    for (int trial = 0; trial < 30; ++trial) {
      const RandomCase c = MakeCase(rng, vocab);
      Sampler s = SamplerWithHistory(c);
      TokenLogprobs lp;
      const int32_t id = s.Sample(c.logits, &lp);
      const std::vector<double> ref =
          RefLogSoftmax(RefProcess(c.logits, c.history, c.params));
      EXPECT_NEAR(lp.logprob, ref[id], 1e-5);
      const size_t n =
          std::min<size_t>(c.params.logprobs, static_cast<size_t>(vocab));
      ASSERT_EQ(lp.top.size(), n);
      std::vector<int32_t> order(vocab);
      for (int i = 0; i < vocab; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
      for (size_t i = 0; i < n; ++i) {
        EXPECT_NEAR(lp.top[i].logprob, ref[order[i]], 1e-5);
        EXPECT_NEAR(lp.top[i].logprob, ref[lp.top[i].id], 1e-5);
      }
    }
  }
}

TEST(SamplerReference, DrawFrequenciesFollowTheReferenceDistribution) {
  std::mt19937_64 rng(11);
  RandomCase c = MakeCase(rng, 23);
  c.params.top_k = 0;
  c.params.top_p = 0.9f;
  c.params.min_p = 0.02f;
  c.params.temperature = 1.3f;
  Sampler s = SamplerWithHistory(c);
  const auto want =
      RefDistribution(RefProcess(c.logits, c.history, c.params), c.params);
  const int n = 30000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[s.Sample(c.logits)];
  int drawn = 0;
  for (const auto& [id, p] : want) {
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(counts[id] / double{n}, p, 5 * sigma + 1e-4) << id;
    drawn += counts[id];
  }
  EXPECT_EQ(drawn, n);  // nothing outside the truncated set
}

TEST(SamplerReference, SameSeedAndHistorySameSequence) {
  std::mt19937_64 rng(3);
  const RandomCase c = MakeCase(rng, 64);
  Sampler a = SamplerWithHistory(c), b = SamplerWithHistory(c);
  for (int i = 0; i < 100; ++i) {
    const int32_t ta = a.Sample(c.logits), tb = b.Sample(c.logits);
    ASSERT_EQ(ta, tb);
    a.Accept(ta);
    b.Accept(tb);
  }
}

TEST(SamplerPenalties, HandWorkedExample) {
  // Logits 2, -2, 1; token 0 seen twice, token 1 once, token 2 never.
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{2, -0.5f}};
  p.logprobs = 0;
  Sampler s(p);
  for (int32_t t : {0, 1, 0}) s.Accept(t);
  // 0: 2 / 2 - (2 * 0.5 + 0.25) = -0.25; 1: -2 * 2 - 0.75 = -4.75;
  // 2: 1 - 0.5 = 0.5 -> greedy picks 2.
  TokenLogprobs lp;
  EXPECT_EQ(s.Sample(std::vector<float>{2.0f, -2.0f, 1.0f}, &lp), 2);
  const double z = std::exp(-0.25) + std::exp(-4.75) + std::exp(0.5);
  EXPECT_NEAR(lp.logprob, 0.5 - std::log(z), 1e-6);
  // A window of 1 sees only the last token (0, once).
  p.penalty_last_n = 1;
  p.logit_bias.clear();
  Sampler w(p);
  for (int32_t t : {1, 1, 0}) w.Accept(t);
  // 0: 2 / 2 - 0.75 = 0.25; 1 untouched: -2; 2: 1 -> 2 wins.
  EXPECT_EQ(w.Sample(std::vector<float>{2.0f, -2.0f, 1.0f}), 2);
  p.penalty_last_n = 0;  // off
  Sampler off(p);
  for (int32_t t : {0, 0, 0}) off.Accept(t);
  EXPECT_EQ(off.Sample(std::vector<float>{2.0f, -2.0f, 1.0f}), 0);
}

TEST(SamplerValidation, EdgesAcceptedBeyondRejectedNamingTheField) {
  struct Edge {
    const char* field;
    void (*ok)(SamplingParams&);
    void (*bad)(SamplingParams&);
  };
  const Edge edges[] = {
      {"top_k", [](SamplingParams& p) { p.top_k = 0; },
       [](SamplingParams& p) { p.top_k = -1; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.0f; },
       [](SamplingParams& p) { p.min_p = 1.0001f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 0.0f; },
       [](SamplingParams& p) { p.min_p = -0.0001f; }},
      {"repetition_penalty",
       [](SamplingParams& p) { p.repetition_penalty = kMaxRepetitionPenalty; },
       [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty",
       [](SamplingParams& p) { p.repetition_penalty = 1e-3f; },
       [](SamplingParams& p) { p.repetition_penalty = 10.5f; }},
      {"frequency_penalty",
       [](SamplingParams& p) { p.frequency_penalty = -2.0f; },
       [](SamplingParams& p) { p.frequency_penalty = 2.01f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.0f; },
       [](SamplingParams& p) { p.presence_penalty = NAN; }},
      {"penalty_last_n",
       [](SamplingParams& p) { p.penalty_last_n = kMaxPenaltyLastN; },
       [](SamplingParams& p) { p.penalty_last_n = kMaxPenaltyLastN + 1; }},
      {"penalty_last_n", [](SamplingParams& p) { p.penalty_last_n = 0; },
       [](SamplingParams& p) { p.penalty_last_n = -1; }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{99, 100.0f}};
       },
       [](SamplingParams& p) {
         p.logit_bias = {{100, 1.0f}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{0, -100.0f}};
       },
       [](SamplingParams& p) {
         p.logit_bias = {{0, -INFINITY}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{0, 1.0f}};
       },
       [](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = kMaxLogprobs; },
       [](SamplingParams& p) { p.logprobs = kMaxLogprobs + 1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; },
       [](SamplingParams& p) { p.logprobs = -2; }},
  };
  for (const Edge& e : edges) {
    SamplingParams p;
    e.ok(p);
    EXPECT_TRUE(ValidateSamplingParams(p, 100).ok()) << e.field;
    p = {};
    e.bad(p);
    const absl::Status s = ValidateSamplingParams(p, 100);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << e.field;
    EXPECT_NE(s.message().find(e.field), std::string::npos) << s.message();
  }
  SamplingParams many;
  for (int i = 0; i <= kMaxLogitBiasEntries; ++i) many.logit_bias[i] = 1.0f;
  EXPECT_FALSE(ValidateSamplingParams(many).ok());
  many.logit_bias.erase(0);
  EXPECT_TRUE(ValidateSamplingParams(many).ok());
}

TEST(StopMatcher, HoldsBackPossiblePrefixesAndCutsAtStop) {
  StopMatcher m({"END", "\n\n"});
  bool stopped = false;
  EXPECT_EQ(m.Push("hello E", &stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Push("N", &stopped), "");
  EXPECT_EQ(m.Push("x", &stopped), "ENx");
  EXPECT_EQ(m.Push(" more\n", &stopped), " more");
  EXPECT_EQ(m.Push("\ntail", &stopped), "");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcher, StopSpanningManyPiecesAndFlush) {
  StopMatcher m({"abc"});
  bool stopped = false;
  std::string out;
  for (const char* piece : {"x", "a", "b", "y", "a", "b"}) {
    out += m.Push(piece, &stopped);
    EXPECT_FALSE(stopped);
  }
  EXPECT_EQ(out, "xaby");
  EXPECT_EQ(m.Flush(), "ab");
  StopMatcher n({"abc"});
  out = n.Push("zzab", &stopped);
  EXPECT_FALSE(stopped);
  out += n.Push("cdef", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "zz");
}

}  // namespace
}  // namespace ckv
