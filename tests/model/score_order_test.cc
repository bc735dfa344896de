// ScoreOrder against a full sort: the head it returns is exactly the head of
// the ScoreBefore order of every block, for sizes that take the sampled and
// the plain threshold search, with ties, NaN, +-inf and +-0 scores, and
// empty segments.
#include "model/kv/policies/score_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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
      order.SetSegments(first);
      order.Reset(scores.data());
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

// A threshold hint changes only the work: with hints that are good, too
// high, too low, infinite or NaN, Best is still exactly the head of the
// full order, and a searched threshold is stored back into the hint.
TEST(ScoreOrderTest, HintsNeverChangeTheHead) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  ScoreOrder order;
  for (int64_t n : {7, 100, 1638}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> scores(n);
      for (float& x : scores) {
        x = g(rng);
        if (kind == 1) x = std::round(x * 4) / 4;
        if (kind == 2 && rng() % 4 == 0) x = rng() % 2 ? NAN : -INFINITY;
      }
      const std::vector<int64_t> first = RandomSegments(rng, n);
      const std::vector<ScoredBlock> want = FullOrder(scores, first);
      for (int64_t prefix : {int64_t{1}, int64_t{33}, n / 2}) {
        std::vector<float> sorted = scores;
        std::sort(sorted.begin(), sorted.end(), std::greater<float>());
        const float good = sorted[std::min<int64_t>(n - 1, prefix)];
        for (float h : {good, 10.0f, -10.0f, INFINITY, -INFINITY, NAN,
                        sorted[0], sorted[n - 1]}) {
          SCOPED_TRACE(::testing::Message()
                       << "n=" << n << " kind=" << kind << " prefix=" << prefix
                       << " hint=" << h);
          order.SetSegments(first);
          order.Reset(scores.data());
          float hint = h;
          ExpectSameHead(order.Best(prefix, &hint), want, prefix);
          // A second step from the stored hint: still the exact head.
          order.SetSegments(first);
          order.Reset(scores.data());
          ExpectSameHead(order.Best(prefix, &hint), want, prefix);
        }
      }
    }
  }
}

TEST(ScoreOrderTest, BestStaysNearOneAndAHalfPrefix) {
  std::mt19937 rng(6);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> scores(8192);
  for (float& x : scores) x = g(rng);
  ScoreOrder order;
  order.SetSegments({0, 4096, 8192});
  order.Reset(scores.data());
  const size_t got = order.Best(33).size();
  EXPECT_GE(got, 33u);
  EXPECT_LE(got, 3u * 33);  // not the whole order
}

}  // namespace
}  // namespace ckv
