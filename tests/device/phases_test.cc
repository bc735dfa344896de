// The phase ops on device layouts, run by the fake, against the product's
// CPU paths: centroid scores bit-equal to CentroidScoresMulti, the queries'
// gather equal to its host form. (Residency against BlockCache:
// cache_phases_test.cc.)
#include "kernels/device/phases.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/device/fake_runtime.h"
#include "model/kv/segment.h"
#include "tests/device/test_util.h"

namespace ckv::kernels::device {
namespace {

static_assert(kPanelWidth == cpu::kCentroidPanel);

FakeConfig Config(Schedule s, uint64_t seed) {
  return TestConfig(s, seed, 32, 20);
}

TEST(ScoreClustersTest, BitEqualToTheCpuProductPath) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  int cases = 0;
  for (int64_t n : {1, 5, 16, 17, 33, 100}) {
    for (int dim : {1, 3, 64, 67, 128}) {
      for (int n_q : {1, 4, 9}) {
        SCOPED_TRACE(testing::Message()
                     << "n " << n << " dim " << dim << " n_q " << n_q);
        std::vector<float> q(n_q * dim), mu(n * dim);
        for (float& x : q) x = g(rng);
        for (float& x : mu) x = g(rng) * (rng() % 7 == 0 ? 300.0f : 1.0f);
        std::vector<uint16_t> panels;
        cpu::PackCentroidPanels(mu.data(), n, dim, &panels);
        ASSERT_EQ(static_cast<int64_t>(panels.size()), PanelElements(n, dim));
        const int64_t ld = n + 3;
        std::vector<float> want(n_q * ld, 0.0f);
        cpu::CentroidScoresMulti(q.data(), n_q, panels.data(), n, dim,
                                 want.data(), ld);
        const Schedule s = cases++ % 2 ? Schedule::kThreaded : Schedule::kLazy;
        FakeRuntime rt(Config(s, cases));
        const Stream st = ValueOrDie(rt.CreateStream());
        const DevPtr dq = Upload(rt, st, q);
        const DevPtr dp = Upload(rt, st, panels);
        const DevPtr ds = Upload(rt, st, std::vector<float>(n_q * ld, 0.0f));
        CKV_ASSERT_OK(
            rt.Launch(ScoreClustersOp({dq, n_q, dp, n, dim, ds, ld}), st));
        const std::vector<float> got = Download<float>(rt, st, ds, n_q * ld);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
        EXPECT_TRUE(rt.OrderingStatus().ok());
      }
    }
  }
}

// A layer's batch (sessions x KV heads, GQA groups of different sizes) in
// one op: every item's scores bit-equal to CentroidScoresMulti on its own.
TEST(ScoreClustersTest, BatchBitEqualPerItem) {
  std::mt19937 rng(12);
  std::normal_distribution<float> g;
  constexpr int kDim = 67;
  const std::vector<std::pair<int, int>> shapes = {
      {1, 3}, {4, 17}, {2, 40}, {8, 1}, {3, 16}};  // (n_q, n)
  std::vector<float> q_pool, want;
  std::vector<uint16_t> panel_pool;
  std::vector<ScoreItem> items;
  std::vector<int64_t> base = {0};
  for (const auto& [n_q, n] : shapes) {
    ScoreItem it;
    it.q_offset = static_cast<int64_t>(q_pool.size());
    it.panel_offset = static_cast<int64_t>(panel_pool.size());
    it.score_offset = static_cast<int64_t>(want.size());
    it.n_q = n_q;
    it.n = n;
    it.ld = n + 1;
    std::vector<float> q(n_q * kDim), mu(n * kDim);
    for (float& x : q) x = g(rng);
    for (float& x : mu) x = g(rng);
    std::vector<uint16_t> panels;
    cpu::PackCentroidPanels(mu.data(), n, kDim, &panels);
    std::vector<float> s(n_q * it.ld, 0.0f);
    cpu::CentroidScoresMulti(q.data(), n_q, panels.data(), n, kDim, s.data(),
                             it.ld);
    q_pool.insert(q_pool.end(), q.begin(), q.end());
    panel_pool.insert(panel_pool.end(), panels.begin(), panels.end());
    want.insert(want.end(), s.begin(), s.end());
    items.push_back(it);
    base.push_back(base.back() + int64_t{n_q} * n);
  }
  for (Schedule sched : {Schedule::kInline, Schedule::kThreaded}) {
    FakeRuntime rt(Config(sched, 3));
    const Stream st = ValueOrDie(rt.CreateStream());
    ScoreBatchArgs a;
    a.items = Upload(rt, st, items);
    a.thread_base = Upload(rt, st, base);
    a.n_items = static_cast<int32_t>(items.size());
    a.dim = kDim;
    a.q_pool = Upload(rt, st, q_pool);
    a.q_elems = static_cast<int64_t>(q_pool.size());
    a.panel_pool = Upload(rt, st, panel_pool);
    a.panel_elems = static_cast<int64_t>(panel_pool.size());
    a.score_pool = Upload(rt, st, std::vector<float>(want.size(), 0.0f));
    a.score_elems = static_cast<int64_t>(want.size());
    a.total_threads = base.back();
    CKV_ASSERT_OK(rt.Launch(ScoreClustersBatchOp(a), st));
    const std::vector<float> got =
        Download<float>(rt, st, a.score_pool, a.score_elems);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
        << ScheduleName(sched);
    EXPECT_TRUE(rt.OrderingStatus().ok());
  }
}

// The planner's query gather: each item's rows copied, or with `shared`
// the group's rows summed in order from 0.0f, exactly as the host planner
// sums them (so -0.0 sums to +0.0 there too); items of different shapes
// and destinations in one op.
TEST(GatherQueriesTest, EqualsTheHostForm) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  struct Shape {
    int n_kv, group, hd, shared;
  };
  const std::vector<Shape> shapes = {
      {2, 4, 16, 1}, {2, 4, 16, 0}, {1, 1, 67, 1}, {3, 2, 8, 1}};
  std::vector<float> src_pool, want;
  std::vector<QueryItem> items;
  for (const Shape& sh : shapes) {
    QueryItem it;
    it.n_kv = sh.n_kv;
    it.group = sh.group;
    it.hd = sh.hd;
    it.shared = sh.shared;
    it.dst_offset = static_cast<int64_t>(want.size()) + 3;  // gaps
    const int64_t rows = int64_t{sh.n_kv} * sh.group;
    std::vector<float> q(rows * sh.hd);
    for (size_t i = 0; i < q.size(); ++i) q[i] = i % 7 == 0 ? -0.0f : g(rng);
    it.src = static_cast<uint64_t>(src_pool.size());  // rebased below
    src_pool.insert(src_pool.end(), q.begin(), q.end());
    want.resize(it.dst_offset, 0.0f);
    for (int kv = 0; kv < sh.n_kv; ++kv) {
      const float* grp = q.data() + int64_t{kv} * sh.group * sh.hd;
      if (!sh.shared || sh.group == 1) {
        want.insert(want.end(), grp, grp + int64_t{sh.group} * sh.hd);
        continue;
      }
      std::vector<float> sum(sh.hd, 0.0f);  // as DevicePlanner::Fill
      for (int i = 0; i < sh.group; ++i) {
        for (int d = 0; d < sh.hd; ++d) sum[d] += grp[i * sh.hd + d];
      }
      want.insert(want.end(), sum.begin(), sum.end());
    }
    items.push_back(it);
  }
  for (Schedule sched : {Schedule::kInline, Schedule::kThreaded}) {
    FakeRuntime rt(Config(sched, 9));
    const Stream st = ValueOrDie(rt.CreateStream());
    const DevPtr src = Upload(rt, st, src_pool);
    std::vector<QueryItem> placed = items;
    for (QueryItem& it : placed) it.src = (src + 4 * it.src).addr;
    GatherQueriesArgs a;
    a.items = Upload(rt, st, placed);
    a.n_items = static_cast<int32_t>(placed.size());
    a.pool_elems = static_cast<int64_t>(want.size());
    a.pool = Upload(rt, st, std::vector<float>(want.size(), 0.0f));
    Op op = GatherQueriesOp(a, placed);
    CKV_ASSERT_OK(rt.Launch(std::move(op), st));
    const std::vector<float> got =
        Download<float>(rt, st, a.pool, a.pool_elems);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
        << ScheduleName(sched);
    EXPECT_TRUE(rt.OrderingStatus().ok());
  }
}

}  // namespace
}  // namespace ckv::kernels::device
