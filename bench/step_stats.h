// Summary of a series of step times: the mean (what a user waits for on
// average, and what a rate is computed from: tok/s = 1 / mean step, as
// llama-bench reports) with the distribution beside it (median, p90, p99,
// max), so that stalls are visible rather than hidden by a median.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace ckv::bench {

struct StepStats {
  int count = 0;
  double mean = 0, median = 0, p90 = 0, p99 = 0, max = 0;  // input units

  // Rate from the mean: `items` per step / mean step (0 when empty).
  double Rate(double items = 1.0) const {
    return mean > 0 ? items / mean : 0.0;
  }
};

// Nearest-rank percentile of sorted values (p in [0, 100]): the smallest
// value with at least p % of the values <= it.
inline double SortedPercentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::ceil(p / 100.0 * sorted.size());
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

inline StepStats ComputeStepStats(std::vector<double> values) {
  StepStats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.count = static_cast<int>(n);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  s.median =
      n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  s.p90 = SortedPercentile(values, 90);
  s.p99 = SortedPercentile(values, 99);
  s.max = values.back();
  return s;
}

}  // namespace ckv::bench
