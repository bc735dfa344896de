// ScoreOrder against a full sort: the head it returns is exactly the head of
// the ScoreBefore order of every block, for sizes that take the sampled and
// the plain threshold search, with ties, NaN, +-inf and +-0 scores, and
// empty segments.
#include "model/kv/policies/score_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace ckv {
namespace {

std::vector<ScoredBlock> FullOrder(const std::vector<float>& scores,
                                   const std::vector<int64_t>& first) {
  std::vector<ScoredBlock> all;
  for (size_t s = 0; s + 1 < first.size(); ++s) {
    for (int64_t i = first[s]; i < first[s + 1]; ++i) {
      const float x = std::isnan(scores[i]) ? -INFINITY : scores[i];
      all.push_back(
          {x, static_cast<int32_t>(s), static_cast<int32_t>(i - first[s])});
    }
  }
  std::sort(all.begin(), all.end(), kScoreBefore);
  return all;
}

// Segments of random sizes (some empty) holding n blocks in all.
std::vector<int64_t> RandomSegments(std::mt19937& rng, int64_t n) {
  std::vector<int64_t> first{0};
  while (first.back() < n) {
    const int64_t size = rng() % 5 == 0 ? 0 : 1 + rng() % 300;
    first.push_back(std::min(n, first.back() + size));
  }
  return first;
}

void ExpectSameHead(const std::vector<ScoredBlock>& got,
                    const std::vector<ScoredBlock>& want, size_t at_least) {
  ASSERT_GE(got.size(), std::min(at_least, want.size()));
  ASSERT_LE(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].segment, want[i].segment) << "rank " << i;
    ASSERT_EQ(got[i].id, want[i].id) << "rank " << i;
    ASSERT_TRUE(got[i].score == want[i].score ||
                (std::isnan(got[i].score) && std::isnan(want[i].score)));
  }
}

TEST(ScoreOrderTest, BestIsTheHeadOfTheFullOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  ScoreOrder order;
  for (int64_t n : {1, 7, 100, 511, 513, 1638, 5000}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> scores(n);
      for (float& x : scores) {
        x = g(rng);
        if (kind == 1) x = std::round(x * 4) / 4;  // many ties
        if (kind == 2 && rng() % 10 == 0) {        // specials
          const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f};
          x = specials[rng() % 5];
        }
        if (kind == 3) x = rng() % 3 == 0 ? NAN : x;  // many NaN
      }
      const std::vector<int64_t> first = RandomSegments(rng, n);
      const std::vector<ScoredBlock> want = FullOrder(scores, first);
      order.Reset(scores.data(), first);
      ASSERT_EQ(order.size(), n);
      for (int64_t prefix : {int64_t{1}, int64_t{8}, int64_t{33}, n / 2, n}) {
        SCOPED_TRACE(::testing::Message()
                     << "n=" << n << " kind=" << kind << " prefix=" << prefix);
        ExpectSameHead(order.Best(prefix), want, prefix);
      }
      const std::vector<ScoredBlock>& all = order.All();
      ASSERT_EQ(all.size(), want.size());
      ExpectSameHead(all, want, want.size());
    }
  }
}

TEST(ScoreOrderTest, BestStaysNearOneAndAHalfPrefix) {
  std::mt19937 rng(6);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> scores(8192);
  for (float& x : scores) x = g(rng);
  ScoreOrder order;
  order.Reset(scores.data(), {0, 4096, 8192});
  const size_t got = order.Best(33).size();
  EXPECT_GE(got, 33u);
  EXPECT_LE(got, 3u * 33);  // not the whole order
}

}  // namespace
}  // namespace ckv
