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
  // The blocks: first.back() of them, segment s's from first[s]
  // (ascending). Kept across Reset calls (the query heads of a KV group
  // share one segment list); rebuilds its lookups only when it changes.
  void SetSegments(const std::vector<int64_t>& first);
  // Takes the scores of the blocks of the last SetSegments. They are read
  // in place: they must stay unchanged until the next Reset. A NaN score
  // ranks as -inf (last).
  void Reset(const float* scores);
  int64_t size() const { return n_; }
  // At least min(prefix, size()) blocks, all in ScoreBefore order, that are
  // exactly the head of the full order (about 1.5 * prefix of them, more
  // on ties). With a hint -- a threshold that suited similar scores, e.g.
  // the same head's previous decode step; NaN: none -- one pass collects
  // the blocks at or above it when that yields between prefix and 3 *
  // prefix of them, else the threshold is searched and stored into *hint.
  // The result never depends on the hint, only the work does.
  const std::vector<ScoredBlock>& Best(int64_t prefix, float* hint = nullptr);
  // Every block in ScoreBefore order.
  const std::vector<ScoredBlock>& All();

 private:
  // lo_, hi_, finite_ of the scores, computed once per Reset.
  void EnsureRange();
  // A threshold t with at least `prefix` scores >= t, aiming at about 1.5
  // * prefix (bisection on a strided sample, checked on every score, then
  // on every score if the sample misses); -inf when fewer than `prefix`
  // scores are finite.
  float Threshold(int64_t prefix);
  int64_t CountAtLeast(float t) const;
  // keys_ = the blocks scoring >= t (t = -inf: every block, NaN as -inf);
  // false, with keys_ partial, once more than max_keys qualify.
  bool Collect(float t, int64_t max_keys);
  // order_ = keys_ in ScoreBefore order.
  void Finish();

  const float* x_ = nullptr;
  int64_t n_ = 0;
  std::vector<int64_t> first_;
  std::vector<int32_t> segment_of_;  // block -> its segment
  bool have_range_ = false;
  float lo_ = 0, hi_ = 0;  // range of the finite scores (lo_ > hi_: none)
  int64_t finite_ = 0;
  std::vector<float> sample_;
  std::vector<uint64_t> keys_;
  std::vector<ScoredBlock> order_;
};

}  // namespace ckv
