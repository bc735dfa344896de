// server/input_budget.h: the input part of an engine step while sessions
// decode, over simulated steps whose cost is a decode part plus a cost per
// input token (no clock: the policy is given the times).
#include "server/input_budget.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace ckv::server {
namespace {

// A step's cost: `decode_s` when any row decodes (the weights are read
// once either way), plus `token_s` per input token.
struct CostModel {
  double decode_s = 0.030;
  double token_s = 0.002;
  double Step(int decode_rows, int64_t input) const {
    return (decode_rows > 0 || input > 0 ? decode_s : 0.0) +
           token_s * static_cast<double>(input);
  }
};

struct Simulated {
  double decode_time = 0.0;  // wall time of the steps (a decoding row waits)
  double input_time = 0.0;   // of which the input part
  int64_t input_tokens = 0;
  int steps = 0;
  int decode_only_steps = 0;
  double worst_step = 0.0;
};

// `steps` steps of `decode_rows` decoding rows and `input_jobs` jobs with
// input; `noise`: each measured time is off by up to that fraction.
Simulated Simulate(InputBudget& budget, const CostModel& cost, int steps,
                   int decode_rows = 1, int input_jobs = 1,
                   double noise = 0.0) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(1.0 - noise, 1.0 + noise);
  Simulated s;
  for (int i = 0; i < steps; ++i) {
    const int64_t n = budget.Next(decode_rows, input_jobs);
    const double t = cost.Step(decode_rows, n);
    budget.Record(decode_rows, n, t * jitter(rng));
    s.decode_time += t;
    s.input_time += t - cost.Step(decode_rows, 0);
    s.input_tokens += n;
    s.decode_only_steps += n == 0;
    s.worst_step = std::max(s.worst_step, t);
    ++s.steps;
  }
  return s;
}

TEST(InputBudgetTest, WithoutDecodingInputTakesTheWholeChunk) {
  InputBudget b({.share = 0.0, .max_tokens = 256});
  EXPECT_EQ(b.Next(0, 1), 256);
  EXPECT_EQ(b.Next(0, 5), 256);
  EXPECT_EQ(b.Next(3, 0), 256);  // nothing to feed: the budget is moot
}

TEST(InputBudgetTest, FirstMeetingRunsADecodeOnlyStepThenTheSmallestPart) {
  InputBudget b({.share = 0.0, .max_tokens = 256, .min_tokens = 2});
  EXPECT_EQ(b.Next(1, 1), 0) << "the decode-only step is measured first";
  b.Record(1, 0, 0.030);
  EXPECT_DOUBLE_EQ(b.decode_step_seconds(), 0.030);
  EXPECT_EQ(b.Next(1, 1), 2) << "per-token cost unknown: min_tokens";
  b.Record(1, 2, 0.030 + 2 * 0.002);
  EXPECT_NEAR(b.input_token_seconds(), 0.002, 1e-12);
  EXPECT_EQ(b.Next(1, 1), 15) << "floor(0.030 / 0.002)";
}

// The fair share with one decoding session and one prefill: each gets half
// of the engine, so the decoding session's step is at most twice its
// decode-only step, and the prefill keeps half of the time.
TEST(InputBudgetTest, FairShareHalvesTheEngineBetweenDecodeAndPrefill) {
  InputBudget b({.share = 0.0, .max_tokens = 256});
  const CostModel cost;
  const Simulated s = Simulate(b, cost, 400);
  EXPECT_LE(s.decode_time / s.steps, 2.0 * cost.decode_s * 1.02);
  EXPECT_GE(s.input_time / s.decode_time, 0.45);
  EXPECT_LE(s.input_time / s.decode_time, 0.52);
  EXPECT_LE(s.decode_only_steps, 400 / InputBudget::kRefreshSteps + 2);
  // Never a step longer than the share allows (no full chunk to measure).
  EXPECT_LE(s.worst_step, 2.0 * cost.decode_s + 1e-12);
}

TEST(InputBudgetTest, FairShareCountsEveryDecodingRow) {
  InputBudget b({.share = 0.0, .max_tokens = 256});
  const CostModel cost{.decode_s = 0.030, .token_s = 0.0001};
  Simulate(b, cost, 8, /*decode_rows=*/3, /*input_jobs=*/1);
  // Input gets 1/4: 0.030 * (1/4) / (3/4) / 0.0001 = 100 tokens.
  EXPECT_EQ(b.Next(3, 1), 100);
  EXPECT_EQ(b.Next(1, 3), 256) << "three inputs, one decoder: 3/4 -> 900";
}

TEST(InputBudgetTest, FixedShareGivesInputThatFractionOfTheTime) {
  for (double share : {0.1, 0.25, 0.75}) {
    InputBudget b({.share = share, .max_tokens = 4096});
    const CostModel cost{.decode_s = 0.030, .token_s = 0.0001};
    const Simulated s = Simulate(b, cost, 300, 1, 1, /*noise=*/0.2);
    const double got = s.input_time / s.decode_time;
    EXPECT_NEAR(got, share, 0.06) << "share " << share;
  }
}

TEST(InputBudgetTest, ShareOneKeepsTheFixedChunk) {
  InputBudget b({.share = 1.0, .max_tokens = 64});
  const Simulated s = Simulate(b, CostModel{}, 50);
  EXPECT_EQ(s.input_tokens, 50 * 64);
  EXPECT_EQ(s.decode_only_steps, 0);
}

TEST(InputBudgetTest, ClampsToTheChunkAndToTheSmallestPart) {
  InputBudget cheap({.share = 0.0, .max_tokens = 256});
  Simulate(cheap, CostModel{.decode_s = 0.005, .token_s = 1e-5}, 4);
  EXPECT_EQ(cheap.Next(1, 1), 256) << "a GPU-like step: the whole chunk";
  InputBudget dear({.share = 0.0, .max_tokens = 256, .min_tokens = 4});
  Simulate(dear, CostModel{.decode_s = 0.030, .token_s = 1.0}, 4);
  EXPECT_EQ(dear.Next(1, 1), 4) << "never less than min_tokens";
  InputBudget dearest({.share = 0.0, .max_tokens = 256});
  Simulate(dearest, CostModel{.decode_s = 0.030, .token_s = 1.0}, 4);
  EXPECT_EQ(dearest.Next(1, 1), 1) << "the default floor: one token a step";
  InputBudget free_tokens({.share = 0.0, .max_tokens = 256});
  Simulate(free_tokens, CostModel{.decode_s = 0.030, .token_s = 0.0}, 4);
  EXPECT_EQ(free_tokens.Next(1, 1), 256) << "zero cost must not divide";
}

// The per-token cost grows with the prefilled context (attention): the
// budget follows it down, and a refresh follows a growing decode step.
TEST(InputBudgetTest, FollowsACostThatGrowsWithContext) {
  InputBudget b({.share = 0.0, .max_tokens = 256});
  CostModel cost{.decode_s = 0.030, .token_s = 0.001};
  Simulate(b, cost, 10);
  const int64_t early = b.Next(1, 1);
  double worst_late = 0.0, input_late = 0.0, time_late = 0.0;
  for (int i = 0; i < 300; ++i) {
    cost.token_s *= 1.005;
    cost.decode_s *= 1.001;
    const Simulated s = Simulate(b, cost, 1);
    if (i < 150) continue;
    worst_late = std::max(worst_late, s.worst_step / cost.decode_s);
    input_late += s.input_time;
    time_late += s.decode_time;
  }
  EXPECT_LT(b.Next(1, 1), early);
  EXPECT_LE(worst_late, 2.1) << "a stale estimate let the step grow";
  EXPECT_GE(input_late / time_late, 0.4)
      << "a stale decode-only time starves the input";
}

TEST(InputBudgetTest, SharesOutOfRangeAreClamped) {
  InputBudget nan_share({.share = std::nan(""), .max_tokens = 64});
  InputBudget big_share({.share = 7.0, .max_tokens = 64});
  const CostModel cost{.decode_s = 0.030, .token_s = 0.001};
  const Simulated fair = Simulate(nan_share, cost, 40);
  EXPECT_NEAR(fair.input_time / fair.decode_time, 0.5, 0.05) << "NaN: fair";
  EXPECT_EQ(Simulate(big_share, cost, 10).input_tokens, 640) << "> 1: 1";
}

TEST(InputBudgetTest, IgnoresMeaninglessTimes) {
  InputBudget b({.share = 0.0, .max_tokens = 256});
  b.Record(1, 0, std::nan(""));
  b.Record(1, 0, -1.0);
  EXPECT_LT(b.decode_step_seconds(), 0.0);
  b.Record(1, 0, 0.030);
  b.Record(1, 16, 0.010);  // faster than the decode part: input is free
  EXPECT_LT(b.input_token_seconds(), 0.0);
  EXPECT_EQ(b.Next(1, 1), 256);
}

}  // namespace
}  // namespace ckv::server
