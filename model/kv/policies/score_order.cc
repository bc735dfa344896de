#include "model/kv/policies/score_order.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckv {
namespace {

// Larger floats get larger keys; -0 and +0 the same key. Not for NaN.
uint32_t FloatKey(float x) {
  x += 0.0f;  // -0 -> +0
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Sorting these keys ascending is ScoreBefore order: descending score, then
// ascending global block index (= ascending segment, then block id).
uint64_t SortKey(float score, int64_t index) {
  return (uint64_t{~FloatKey(score)} << 32) | static_cast<uint32_t>(index);
}

int64_t Count(const float* x, int64_t n, float t) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += x[i] >= t;
  return c;
}

// Bisects [lo, hi] for a t with Count(x, t) >= want, as large as the search
// allows, stopping once Count(x, t) <= max_count. Requires Count(lo) >= want.
float Bisect(const float* x, int64_t n, float lo, float hi, int64_t want,
             int64_t max_count) {
  for (int it = 0; it < 40 && lo < hi; ++it) {
    const float mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    const int64_t count = Count(x, n, mid);
    if (count < want) {
      hi = mid;
      continue;
    }
    lo = mid;
    if (count <= max_count) break;
  }
  return lo;
}

constexpr int64_t kSample = 256;  // scores in the sample, about

}  // namespace

void ScoreOrder::SetSegments(const std::vector<int64_t>& first) {
  if (first == first_) return;
  first_ = first;
  n_ = first.empty() ? 0 : first.back();
  segment_of_.resize(n_);
  for (size_t s = 0; s + 1 < first.size(); ++s) {
    std::fill(segment_of_.begin() + first[s],
              segment_of_.begin() + first[s + 1], static_cast<int32_t>(s));
  }
}

void ScoreOrder::Reset(const float* scores) {
  x_ = scores;
  have_range_ = false;
}

void ScoreOrder::EnsureRange() {
  if (have_range_) return;
  have_range_ = true;
  // Four independent accumulators; NaN fails every compare, so it counts
  // as -inf and moves neither bound.
  float lo[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
  float hi[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t above[4] = {0, 0, 0, 0};
  const float* x = x_;
  int64_t i = 0;
  const auto add = [&](int j, float v) {
    const bool a = v > -INFINITY;  // false for NaN and -inf
    lo[j] = a && v < lo[j] ? v : lo[j];
    hi[j] = a && v > hi[j] ? v : hi[j];
    above[j] += a;
  };
  for (; i + 4 <= n_; i += 4) {
    for (int j = 0; j < 4; ++j) add(j, x[i + j]);
  }
  for (; i < n_; ++i) add(0, x[i]);
  finite_ = above[0] + above[1] + above[2] + above[3];
  lo_ = std::min(std::min(lo[0], lo[1]), std::min(lo[2], lo[3]));
  hi_ = finite_ > 0 ? std::max(std::max(hi[0], hi[1]), std::max(hi[2], hi[3]))
                    : -INFINITY;
}

int64_t ScoreOrder::CountAtLeast(float t) const { return Count(x_, n_, t); }

float ScoreOrder::Threshold(int64_t prefix) {
  EnsureRange();
  if (finite_ < prefix || !(lo_ <= hi_)) return -INFINITY;
  const int64_t aim = prefix + prefix / 2;
  float lo = lo_, hi = hi_;  // Count(lo) >= prefix throughout
  const int64_t stride = n_ / kSample;
  if (stride >= 2) {
    sample_.clear();
    for (int64_t i = 0; i < n_; i += stride) sample_.push_back(x_[i]);
    const int64_t m = static_cast<int64_t>(sample_.size());
    const int64_t want = std::max<int64_t>(1, (aim + stride - 1) / stride);
    const float t = Bisect(sample_.data(), m, lo, hi, want, want + want / 2);
    const int64_t count = CountAtLeast(t);
    if (count >= prefix && count <= 3 * prefix) return t;
    if (count >= prefix) {
      lo = t;
    } else {
      hi = t;
    }
  }
  return Bisect(x_, n_, lo, hi, prefix, 2 * prefix);
}

bool ScoreOrder::Collect(float t, int64_t max_keys) {
  keys_.clear();
  const float* x = x_;
  if (t == -INFINITY) {  // every block; NaN ranks as -inf
    for (int64_t i = 0; i < n_; ++i) {
      keys_.push_back(SortKey(x[i] == x[i] ? x[i] : -INFINITY, i));
    }
    return static_cast<int64_t>(keys_.size()) <= max_keys;
  }
  int64_t i = 0;
#if defined(__SSE2__)
  // Most chunks of 8 have no score >= t: one compare mask each.
  const __m128 tv = _mm_set1_ps(t);
  for (; i + 8 <= n_; i += 8) {
    int mask = _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + i), tv)) |
               _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + i + 4), tv)) << 4;
    for (; mask != 0; mask &= mask - 1) {
      const int j = __builtin_ctz(mask);
      keys_.push_back(SortKey(x[i + j], i + j));
    }
    if (static_cast<int64_t>(keys_.size()) > max_keys) return false;
  }
#endif
  for (; i < n_; ++i) {
    if (x[i] >= t) keys_.push_back(SortKey(x[i], i));
  }
  return static_cast<int64_t>(keys_.size()) <= max_keys;
}

void ScoreOrder::Finish() {
  std::sort(keys_.begin(), keys_.end());
  order_.resize(keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    const int64_t index = static_cast<int64_t>(keys_[k] & 0xffffffffu);
    const int32_t s = segment_of_[index];
    const float x = x_[index];
    order_[k] = {x == x ? x : -INFINITY, s,
                 static_cast<int32_t>(index - first_[s])};
  }
}

const std::vector<ScoredBlock>& ScoreOrder::Best(int64_t prefix, float* hint) {
  if (prefix >= n_) return All();
  if (hint != nullptr && std::isfinite(*hint) && Collect(*hint, 3 * prefix) &&
      static_cast<int64_t>(keys_.size()) >= prefix) {
    Finish();
    return order_;
  }
  const float t = Threshold(prefix);
  Collect(t, n_);
  Finish();
  if (hint != nullptr) *hint = t;
  return order_;
}

const std::vector<ScoredBlock>& ScoreOrder::All() {
  Collect(-INFINITY, n_);
  Finish();
  return order_;
}

}  // namespace ckv
