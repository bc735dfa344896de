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

void ScoreOrder::Reset(const float* scores, const std::vector<int64_t>& first) {
  const int64_t n = first.empty() ? 0 : first.back();
  first_ = first;
  scores_.resize(n);
  // NaN -> -inf (a loop the compiler vectorises), then the range and count
  // of the scores above -inf with four independent accumulators.
  float* out = scores_.data();
  for (int64_t i = 0; i < n; ++i) {
    out[i] = scores[i] == scores[i] ? scores[i] : -INFINITY;
  }
  float lo[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
  float hi[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int64_t above[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) {
      const float x = out[i + j];
      const bool a = x != -INFINITY;
      lo[j] = std::min(lo[j], a ? x : INFINITY);
      hi[j] = std::max(hi[j], x);
      above[j] += a;
    }
  }
  for (; i < n; ++i) {
    const float x = out[i];
    const bool a = x != -INFINITY;
    lo[0] = std::min(lo[0], a ? x : INFINITY);
    hi[0] = std::max(hi[0], x);
    above[0] += a;
  }
  finite_ = above[0] + above[1] + above[2] + above[3];
  lo_ = std::min(std::min(lo[0], lo[1]), std::min(lo[2], lo[3]));
  hi_ = finite_ > 0 ? std::max(std::max(hi[0], hi[1]), std::max(hi[2], hi[3]))
                    : -INFINITY;
}

int64_t ScoreOrder::CountAtLeast(float t) const {
  return Count(scores_.data(), size(), t);
}

float ScoreOrder::Threshold(int64_t prefix) {
  if (finite_ < prefix || !(lo_ <= hi_)) return -INFINITY;
  const int64_t n = size();
  const int64_t aim = prefix + prefix / 2;
  float lo = lo_, hi = hi_;  // Count(lo) >= prefix throughout
  const int64_t stride = n / kSample;
  if (stride >= 2) {
    sample_.clear();
    for (int64_t i = 0; i < n; i += stride) sample_.push_back(scores_[i]);
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
  return Bisect(scores_.data(), n, lo, hi, prefix, 2 * prefix);
}

void ScoreOrder::OrderAtLeast(float t) {
  keys_.clear();
  const int64_t n = size();
  const float* x = scores_.data();
  int64_t i = 0;
#if defined(__SSE2__)
  // Most chunks of 8 have no score >= t: one compare mask each.
  const __m128 tv = _mm_set1_ps(t);
  for (; i + 8 <= n; i += 8) {
    int mask = _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + i), tv)) |
               _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + i + 4), tv)) << 4;
    for (; mask != 0; mask &= mask - 1) {
      const int j = __builtin_ctz(mask);
      keys_.push_back(SortKey(x[i + j], i + j));
    }
  }
#endif
  for (; i < n; ++i) {
    if (x[i] >= t) keys_.push_back(SortKey(x[i], i));
  }
  std::sort(keys_.begin(), keys_.end());
  order_.resize(keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    const int64_t index = static_cast<int64_t>(keys_[k] & 0xffffffffu);
    const int64_t s = std::upper_bound(first_.begin(), first_.end(), index) -
                      first_.begin() - 1;
    order_[k] = {scores_[index], static_cast<int32_t>(s),
                 static_cast<int32_t>(index - first_[s])};
  }
}

const std::vector<ScoredBlock>& ScoreOrder::Best(int64_t prefix) {
  OrderAtLeast(prefix >= size() ? -INFINITY : Threshold(prefix));
  return order_;
}

const std::vector<ScoredBlock>& ScoreOrder::All() {
  OrderAtLeast(-INFINITY);
  return order_;
}

}  // namespace ckv
