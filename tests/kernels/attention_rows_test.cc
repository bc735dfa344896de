// Attention over index-list spans (KvSpan::rows): an index-list span equals
// the contiguous span of the gathered rows; random unsorted index lists with
// gaps against ref::Attention (prefill, causal); decode where every query
// head of a GQA group has its own lists of different lengths.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
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

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// K/V of one KV head: n rows, stride hd + 3.
struct Store {
  Store(std::mt19937& rng, DType t, int64_t n, int hd)
      : dtype(t), stride(hd + 3), rb(RowBytes(t, hd + 3)) {
    k = Encode(t, RandomFloats(rng, n * stride), n, stride);
    v = Encode(t, RandomFloats(rng, n * stride), n, stride);
  }
  KvSpan Span(const int32_t* rows, int64_t count, int64_t first_pos = 0) const {
    KvSpan sp;
    sp.k = k.data();
    sp.v = v.data();
    sp.dtype = dtype;
    sp.stride = stride;
    sp.count = count;
    sp.first_pos = first_pos;
    sp.rows = rows;
    return sp;
  }
  DType dtype;
  int64_t stride, rb;
  std::vector<uint8_t> k, v;
};

// `count` distinct rows of [0, n) in random order (so with gaps).
std::vector<int32_t> RandomRows(std::mt19937& rng, int64_t n, int64_t count) {
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(count);
  return all;
}

AttentionArgs Args(const std::vector<float>& q, const std::vector<int64_t>& pos,
                   int n_heads, int hd, const std::vector<KvSpanList>& lists,
                   float* out) {
  AttentionArgs a;
  a.q = q.data();
  a.q_pos = pos.data();
  a.n_q = static_cast<int>(pos.size());
  a.n_heads = n_heads;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.kv = lists.data();
  a.out = out;
  return a;
}

// n_q: the call's query count (testing::AttentionTolerance).
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const char* what, size_t n_q) {
  ASSERT_EQ(got.size(), want.size());
  const double tol = testing::AttentionTolerance(static_cast<int>(n_q));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << what << " i=" << i;
  }
}

class AttentionRowsTest : public ::testing::TestWithParam<const KernelSet*> {
 protected:
  ScopedKernels scoped_{GetParam()};
};

// The gathered copy carries the same positions explicitly: results must be
// bitwise equal (the tiles hold the same rows).
TEST_P(AttentionRowsTest, IndexListEqualsGatheredContiguousSpan) {
  std::mt19937 rng(31);
  for (DType t : kTypes) {
    const int hd = 64, n_heads = 2;
    const int64_t n = 500;
    Store store(rng, t, n, hd);
    const std::vector<int32_t> rows = RandomRows(rng, n, 300);
    Store gathered = store;
    std::vector<int64_t> positions(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      std::memcpy(gathered.k.data() + r * store.rb,
                  store.k.data() + rows[r] * store.rb, store.rb);
      std::memcpy(gathered.v.data() + r * store.rb,
                  store.v.data() + rows[r] * store.rb, store.rb);
      positions[r] = 10 + rows[r];
    }
    const KvSpan indexed = store.Span(rows.data(), 300, 10);
    KvSpan contiguous = gathered.Span(nullptr, 300);
    contiguous.positions = positions.data();
    const auto q = RandomFloats(rng, 3 * n_heads * hd, -2, 2);
    const std::vector<int64_t> qpos = {200, 400, 600};
    std::vector<float> a(q.size()), b(q.size()), want(q.size());
    std::vector<KvSpanList> la(n_heads, {&indexed, 1});
    std::vector<KvSpanList> lb(n_heads, {&contiguous, 1});
    ThreadPool pool(2);
    Attention(&pool, Args(q, qpos, n_heads, hd, la, a.data()));
    Attention(&pool, Args(q, qpos, n_heads, hd, lb, b.data()));
    EXPECT_EQ(a, b) << DTypeName(t);
    ref::Attention(Args(q, qpos, n_heads, hd, la, want.data()));
    ExpectNear(a, want, DTypeName(t), qpos.size());
  }
}

// Rows stored out of position order with a row_positions map (how a
// clustered segment stores them), plain and through an index list, equal the
// position-ordered store (causal prefill: the map decides what each query
// sees); results are bitwise equal to it and close to the reference.
TEST_P(AttentionRowsTest, RowPositionsMapEqualsPositionOrderedRows) {
  std::mt19937 rng(34);
  for (DType t : kTypes) {
    const int hd = 40, n_heads = 4;
    const int64_t n = 333, first = 7;
    Store ordered(rng, t, n, hd);
    std::vector<int32_t> seg_row = RandomRows(rng, n, n);  // stored j -> row
    Store permuted = ordered;
    std::vector<int32_t> stored_of(n);
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(permuted.k.data() + j * ordered.rb,
                  ordered.k.data() + seg_row[j] * ordered.rb, ordered.rb);
      std::memcpy(permuted.v.data() + j * ordered.rb,
                  ordered.v.data() + seg_row[j] * ordered.rb, ordered.rb);
      stored_of[seg_row[j]] = static_cast<int32_t>(j);
    }
    KvSpan plain = permuted.Span(nullptr, n, first);
    plain.row_positions = seg_row.data();
    // The rows of positions first + 50 .. first + 249, through an index list.
    std::vector<int32_t> some(stored_of.begin() + 50, stored_of.begin() + 250);
    KvSpan listed = permuted.Span(some.data(), some.size(), first);
    listed.row_positions = seg_row.data();
    const KvSpan want_plain = ordered.Span(nullptr, n, first);
    const KvSpan want_listed = [&] {
      KvSpan s = ordered.Span(nullptr, 200, first + 50);
      s.k = ordered.k.data() + 50 * ordered.rb;
      s.v = ordered.v.data() + 50 * ordered.rb;
      return s;
    }();
    const std::vector<int64_t> qpos = {first, first + 120, first + 260, 999};
    const auto q = RandomFloats(rng, qpos.size() * n_heads * hd, -2, 2);
    for (const auto& [span, want_span] :
         {std::pair{plain, want_plain}, std::pair{listed, want_listed}}) {
      std::vector<float> got(q.size()), want(q.size()), ref_out(q.size());
      std::vector<KvSpanList> lg(n_heads, {&span, 1});
      std::vector<KvSpanList> lw(n_heads, {&want_span, 1});
      ThreadPool pool(2);
      Attention(&pool, Args(q, qpos, n_heads, hd, lg, got.data()));
      Attention(&pool, Args(q, qpos, n_heads, hd, lw, want.data()));
      ref::Attention(Args(q, qpos, n_heads, hd, lg, ref_out.data()));
      ExpectNear(got, want, DTypeName(t), qpos.size());
      ExpectNear(ref_out, want, DTypeName(t), qpos.size());
    }
  }
}

// Prefill: each KV head attends a contiguous sink span, an index list with
// implicit positions (first_pos + rows[r]) and one with explicit positions.
TEST_P(AttentionRowsTest, RandomIndexListsPrefillMatchRef) {
  std::mt19937 rng(32);
  for (DType t : kTypes) {
    for (int hd : {17, 64, 128}) {
      const int n_heads = 4, n_kv = 2;
      const int64_t n = 700;
      std::vector<Store> stores;
      std::vector<std::vector<int32_t>> rows;
      std::vector<std::vector<int64_t>> pos;
      for (int h = 0; h < n_kv; ++h) {
        stores.emplace_back(rng, t, n, hd);
        std::vector<int32_t> r = RandomRows(rng, n - 16, 200 + 70 * h);
        for (int32_t& x : r) x += 16;  // rows 16.. (0..15 are the sinks)
        rows.push_back({r.begin(), r.begin() + 130});
        rows.push_back({r.begin() + 130, r.end()});
        pos.emplace_back(rows.back().begin(), rows.back().end());
      }
      std::vector<std::vector<KvSpan>> spans(n_kv);
      for (int h = 0; h < n_kv; ++h) {
        const auto& a = rows[2 * h];
        const auto& b = rows[2 * h + 1];
        spans[h].push_back(stores[h].Span(nullptr, 16));
        spans[h].push_back(stores[h].Span(a.data(), a.size()));
        spans[h].push_back(stores[h].Span(b.data(), b.size(), -999));
        spans[h].back().positions = pos[h].data();
      }
      std::vector<KvSpanList> lists;
      for (int h = 0; h < n_heads; ++h) {
        const auto& s = spans[h / (n_heads / n_kv)];
        lists.push_back({s.data(), static_cast<int>(s.size())});
      }
      std::vector<int64_t> qpos(37);
      std::iota(qpos.begin(), qpos.end(), 400);
      const auto q = RandomFloats(rng, qpos.size() * n_heads * hd, -2, 2);
      std::vector<float> got(q.size()), want(q.size());
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        Attention(&pool, Args(q, qpos, n_heads, hd, lists, got.data()));
        ref::Attention(Args(q, qpos, n_heads, hd, lists, want.data()));
        ExpectNear(got, want, DTypeName(t), qpos.size());
      }
    }
  }
}

// Decode: 8 query heads over 2 KV heads; every query head has its own
// index list (lengths 0..~900), plus shared sinks and tail spans.
TEST_P(AttentionRowsTest, DecodePerHeadIndexListsMatchRef) {
  std::mt19937 rng(33);
  for (DType t : kTypes) {
    const int n_heads = 8, n_kv = 2, hd = 64;
    const int64_t n = 1200;
    std::vector<Store> stores;
    for (int h = 0; h < n_kv; ++h) stores.emplace_back(rng, t, n, hd);
    std::vector<std::vector<int32_t>> rows(n_heads);
    std::vector<std::vector<KvSpan>> spans(n_heads);
    for (int h = 0; h < n_heads; ++h) {
      const Store& st = stores[h / (n_heads / n_kv)];
      const int64_t len = h == 3 ? 0 : 1 + (rng() % 900);
      rows[h] = RandomRows(rng, n - 48, len);
      for (int32_t& x : rows[h]) x += 16;
      spans[h].push_back(st.Span(nullptr, 16));
      spans[h].push_back(st.Span(rows[h].data(), len));
      KvSpan tail = st.Span(nullptr, 32, n - 32);
      tail.k = st.k.data() + (n - 32) * st.rb;
      tail.v = st.v.data() + (n - 32) * st.rb;
      spans[h].push_back(tail);
    }
    std::vector<KvSpanList> lists;
    for (int h = 0; h < n_heads; ++h) {
      lists.push_back({spans[h].data(), static_cast<int>(spans[h].size())});
    }
    const std::vector<int64_t> qpos = {n};
    const auto q = RandomFloats(rng, n_heads * hd, -2, 2);
    std::vector<float> got(q.size()), want(q.size());
    ref::Attention(Args(q, qpos, n_heads, hd, lists, want.data()));
    for (int threads : {0, 1, 2, 3}) {
      ThreadPool pool(std::max(threads, 1));
      std::fill(got.begin(), got.end(), NAN);
      Attention(threads > 0 ? &pool : nullptr,
                Args(q, qpos, n_heads, hd, lists, got.data()));
      ExpectNear(got, want, DTypeName(t), qpos.size());
    }
  }
}

std::string SetName(const ::testing::TestParamInfo<const KernelSet*>& i) {
  return i.param->name;
}

INSTANTIATE_TEST_SUITE_P(Sets, AttentionRowsTest,
                         ::testing::ValuesIn(AvailableKernelSets()), SetName);

}  // namespace
}  // namespace ckv::kernels::cpu
