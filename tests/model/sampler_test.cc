#include <gtest/gtest.h>

#include <cmath>
#include <map>

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
