// The head of the ScoreBefore order (selection.h) of many scored blocks --
// e.g. the clusters of every segment, one score each -- found without
// sorting them all: a threshold that enough scores reach, then a sort of
// only the blocks at or above it. Exact: the head equals the head of a full
// sort.
#pragma once

#include <cstdint>
#include <vector>

#include "model/kv/selection.h"

namespace ckv {

class ScoreOrder {
 public:
  // Takes the scores of `first.back()` blocks, segment s's blocks from
  // first[s] (ascending); a NaN score becomes -inf (it ranks last).
  void Reset(const float* scores, const std::vector<int64_t>& first);
  int64_t size() const { return static_cast<int64_t>(scores_.size()); }
  // At least min(prefix, size()) blocks, all in ScoreBefore order, that are
  // exactly the head of the full order (about 1.5 * prefix of them, more
  // on ties).
  const std::vector<ScoredBlock>& Best(int64_t prefix);
  // Every block in ScoreBefore order.
  const std::vector<ScoredBlock>& All();

 private:
  // A threshold t with at least `prefix` scores >= t, aiming at about 1.5
  // * prefix (bisection on a strided sample, checked on every score, then
  // on every score if the sample misses); -inf when fewer than `prefix`
  // scores are finite.
  float Threshold(int64_t prefix);
  int64_t CountAtLeast(float t) const;
  // order_ = the blocks scoring >= t, in ScoreBefore order.
  void OrderAtLeast(float t);

  std::vector<float> scores_;
  std::vector<int64_t> first_;
  float lo_ = 0, hi_ = 0;  // range of the finite scores (lo_ > hi_: none)
  int64_t finite_ = 0;
  std::vector<float> sample_;
  std::vector<uint64_t> keys_;
  std::vector<ScoredBlock> order_;
};

}  // namespace ckv
