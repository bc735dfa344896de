// Fast flash attention against ref::Attention: several spans per head (one
// empty, one with explicit non-ascending positions, listed out of order),
// causal masking with queries at different positions, F32/F16/BF16 rows,
// GQA groups and distinct heads, odd head dims, long contexts, 1-3 threads.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::AvailableKernelSets;
using testing::Encode;
using testing::RandomFloats;
using testing::ScopedKernels;

struct Shape {
  int n_q, n_heads, n_kv, head_dim;
  int64_t n_ctx;
  DType dtype;
  int64_t first_q_pos;  // q_pos[t] = first_q_pos + t
};

// Owns K/V storage and span lists for one attention call.
class KvFixture {
 public:
  KvFixture(const Shape& s, std::mt19937& rng) : s_(s) {
    const int64_t stride = s.head_dim + 3;  // rows are not packed
    for (int h = 0; h < s.n_kv; ++h) {
      k_.push_back(Encode(s.dtype, RandomFloats(rng, s.n_ctx * stride), s.n_ctx,
                          stride));
      v_.push_back(Encode(s.dtype, RandomFloats(rng, s.n_ctx * stride), s.n_ctx,
                          stride));
    }
    // Cut [0, n_ctx) into 3 spans plus an empty one; span 1 gets explicit,
    // descending positions; the list is stored in reverse order.
    const int64_t c1 = s.n_ctx / 3, c2 = s.n_ctx * 3 / 4;
    const int64_t cuts[4] = {0, c1, c2, s.n_ctx};
    positions_.resize(c2 - c1);
    for (int64_t r = 0; r < c2 - c1; ++r) positions_[r] = c2 - 1 - r;
    const int64_t rb = RowBytes(s.dtype, stride);
    spans_.resize(s.n_kv);
    for (int h = 0; h < s.n_kv; ++h) {
      for (int i = 2; i >= 0; --i) {
        KvSpan sp;
        sp.dtype = s.dtype;
        sp.stride = stride;
        sp.count = cuts[i + 1] - cuts[i];
        sp.first_pos = cuts[i];
        if (i == 1) {
          // Rows stored reversed: row r holds position c2 - 1 - r.
          sp.positions = positions_.data();
          sp.first_pos = -999;  // ignored when positions is set
        }
        sp.k = k_[h].data() + cuts[i] * rb;
        sp.v = v_[h].data() + cuts[i] * rb;
        spans_[h].push_back(sp);
        if (i == 1) spans_[h].push_back(KvSpan{});  // empty span
      }
    }
    for (int h = 0; h < s.n_heads; ++h) {
      const auto& list = spans_[h / (s.n_heads / s.n_kv)];
      lists_.push_back({list.data(), static_cast<int>(list.size())});
    }
    q_ = RandomFloats(rng, int64_t{s.n_q} * s.n_heads * s.head_dim, -2, 2);
    for (int t = 0; t < s.n_q; ++t) q_pos_.push_back(s.first_q_pos + t);
  }

  AttentionArgs Args(float* out) const {
    AttentionArgs a;
    a.q = q_.data();
    a.q_pos = q_pos_.data();
    a.n_q = s_.n_q;
    a.n_heads = s_.n_heads;
    a.head_dim = s_.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(s_.head_dim));
    a.kv = lists_.data();
    a.out = out;
    return a;
  }

 private:
  Shape s_;
  std::vector<std::vector<uint8_t>> k_, v_;
  std::vector<int64_t> positions_;
  std::vector<std::vector<KvSpan>> spans_;
  std::vector<KvSpanList> lists_;
  std::vector<float> q_;
  std::vector<int64_t> q_pos_;
};

// window / softcap: AttentionArgs::window and ::softcap (0 = off).
void CheckAttention(const Shape& s, int threads, std::mt19937& rng,
                    int64_t window = 0, float softcap = 0.0f) {
  KvFixture fx(s, rng);
  const size_t n = size_t{1} * s.n_q * s.n_heads * s.head_dim;
  std::vector<float> out(n, NAN), want(n);
  ThreadPool pool(threads);
  AttentionArgs fast = fx.Args(out.data()), slow = fx.Args(want.data());
  fast.window = slow.window = window;
  fast.softcap = slow.softcap = softcap;
  Attention(threads > 0 ? &pool : nullptr, fast);
  ref::Attention(slow);
  const double tol = testing::AttentionTolerance(s.n_q);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(out[i], want[i], tol)
        << "i=" << i << " n_q=" << s.n_q << " n_ctx=" << s.n_ctx
        << " hd=" << s.head_dim << " dtype=" << DTypeName(s.dtype)
        << " threads=" << threads << " window=" << window
        << " softcap=" << softcap;
  }
}

class FastAttentionTest : public ::testing::TestWithParam<const KernelSet*> {
 protected:
  ScopedKernels scoped_{GetParam()};
};

TEST_P(FastAttentionTest, DecodeAllKvTypes) {
  std::mt19937 rng(11);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int threads : {0, 1, 2, 3}) {
      CheckAttention({1, 8, 2, 64, 1100, t, 1100}, threads, rng);
    }
  }
}

TEST_P(FastAttentionTest, CausalPrefillOddSizes) {
  std::mt19937 rng(12);
  for (int threads : {1, 2}) {
    CheckAttention({3, 4, 2, 64, 40, DType::kF16, 37}, threads, rng);
    CheckAttention({17, 6, 3, 40, 130, DType::kF32, 113}, threads, rng);
    CheckAttention({70, 4, 4, 17, 200, DType::kBF16, 130}, threads, rng);
    CheckAttention({5, 2, 1, 80, 64, DType::kF16, 59}, threads, rng);
  }
}

// Sliding windows cut inside tiles and spans (the fixture's middle span has
// descending explicit positions); soft-capping with a small cap.
TEST_P(FastAttentionTest, SlidingWindowAndSoftCap) {
  std::mt19937 rng(21);
  for (int threads : {0, 2}) {
    for (int64_t window : {1, 7, 64, 100, 5000}) {
      CheckAttention({1, 8, 2, 64, 1100, DType::kF16, 1099}, threads, rng,
                     window);
      CheckAttention({70, 4, 2, 40, 300, DType::kF32, 230}, threads, rng,
                     window);
    }
    CheckAttention({1, 8, 2, 64, 1100, DType::kF32, 1099}, threads, rng, 0,
                   0.5f);
    CheckAttention({33, 4, 4, 17, 200, DType::kBF16, 167}, threads, rng, 48,
                   2.0f);
  }
}

// Items of few rows take the decode forms (<= 4 rows: K/V read straight from
// storage when head_dim % 8 == 0; 5-8 rows: a row-major key tile), with
// head dims that leave a partial 32-dim block (40, 72) or are not a
// multiple of 8 (17, 30: the tile forms).
TEST_P(FastAttentionTest, FewRowFormsOddHeadDims) {
  std::mt19937 rng(15);
  for (int threads : {0, 2}) {
    CheckAttention({1, 6, 2, 40, 150, DType::kF16, 149}, threads, rng);   // 3
    CheckAttention({1, 4, 4, 72, 200, DType::kBF16, 199}, threads, rng);  // 1
    CheckAttention({1, 4, 4, 17, 130, DType::kF32, 129}, threads, rng);   // 1
    CheckAttention({2, 6, 2, 40, 150, DType::kF16, 148}, threads, rng);   // 6
    CheckAttention({2, 8, 2, 30, 100, DType::kBF16, 98}, threads, rng);   // 8
    CheckAttention({1, 8, 1, 24, 90, DType::kF32, 89}, threads, rng);     // 8
  }
}

TEST_P(FastAttentionTest, LongContextManyQueries) {
  std::mt19937 rng(13);
  CheckAttention({300, 2, 1, 64, 1300, DType::kF16, 1000}, 2, rng);
  CheckAttention({129, 8, 2, 64, 1029, DType::kF32, 900}, 3, rng);
}

TEST_P(FastAttentionTest, QueriesBeforeAllKeysGiveZeros) {
  std::mt19937 rng(14);
  // Queries at positions -3..1: the first three see nothing.
  CheckAttention({5, 2, 1, 32, 100, DType::kF16, -3}, 2, rng);
  KvFixture fx({2, 2, 1, 32, 50, DType::kF32, -10}, rng);
  std::vector<float> out(2 * 2 * 32, NAN);
  Attention(nullptr, fx.Args(out.data()));
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST_P(FastAttentionTest, EmptySpanListsAndZeroQueries) {
  std::vector<float> q(2 * 16, 1.0f), out(2 * 16, NAN);
  const int64_t pos = 5;
  KvSpanList lists[2] = {};
  AttentionArgs a;
  a.q = q.data();
  a.q_pos = &pos;
  a.n_q = 1;
  a.n_heads = 2;
  a.head_dim = 16;
  a.scale = 0.25f;
  a.kv = lists;
  a.out = out.data();
  ThreadPool pool(2);
  Attention(&pool, a);
  for (float v : out) EXPECT_EQ(v, 0.0f);
  a.n_q = 0;
  Attention(&pool, a);  // no-op
}

std::string SetName(const ::testing::TestParamInfo<const KernelSet*>& i) {
  return i.param->name;
}

INSTANTIATE_TEST_SUITE_P(Sets, FastAttentionTest,
                         ::testing::ValuesIn(AvailableKernelSets()), SetName);

}  // namespace
}  // namespace ckv::kernels::cpu
