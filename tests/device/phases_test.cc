// The phase ops on device layouts, run by the fake, against the product's
// CPU paths: centroid scores bit-equal to CentroidScoresMulti, residency
// statistics equal to BlockCache's over 40-step runs.
#include "kernels/device/phases.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/device/fake_runtime.h"
#include "model/kv/block_cache.h"
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
// ---- Residency vs BlockCache -------------------------------------------

constexpr int kHeadDim = 8;

const KvShape& Shape() {
  static const KvShape s{
      .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = kHeadDim};
  return s;
}

// A segment of `sizes.size()` clusters of the given sizes (layer 0, head 0).
std::unique_ptr<Segment> MakeSegment(int64_t uid,
                                     const std::vector<int32_t>& sizes) {
  int32_t n = 0;
  for (int32_t s : sizes) n += s;
  auto seg = std::make_unique<Segment>(uid, 16 + uid * 1000, n, Shape());
  seg->layer(0).heads.resize(1);
  HeadIndex& h = seg->layer(0).heads[0];
  h.k = static_cast<int>(sizes.size());
  h.offsets.push_back(0);
  for (int32_t s : sizes) h.offsets.push_back(h.offsets.back() + s);
  for (int32_t r = 0; r < n; ++r) h.members.push_back(r);
  return seg;
}

struct Counters {
  ResidencyCounters k;
  bool operator==(const CacheStats& c) const {
    return k.lookups == c.lookups && k.hits == c.hits && k.misses == c.misses &&
           k.hit_tokens == c.hit_tokens && k.miss_tokens == c.miss_tokens &&
           k.h2d_bytes == c.h2d_bytes;
  }
};

// 40 steps of selections over 3 segments (a drifting hot set, repeats
// within a step as a GQA group's union gives): the device residency ops and
// BlockCache see the same requests; their counters agree after every step.
void RunResidency(Schedule sched, uint64_t seed, int cache_steps) {
  std::mt19937 rng(100 + cache_steps);
  std::vector<std::unique_ptr<Segment>> segs;
  std::vector<int32_t> base;
  int32_t n_blocks = 0;
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> sizes(5 + rng() % 8);
    for (int32_t& x : sizes) x = 1 + rng() % 60;
    segs.push_back(MakeSegment(s + 1, sizes));
    base.push_back(n_blocks);
    n_blocks += static_cast<int32_t>(sizes.size());
  }
  constexpr int kMaxReq = 64;
  const int32_t n_pages = n_blocks * 4;  // every block resident at once fits
  BlockCache cache(kHeadDim, cache_steps, 16, /*copy_rows=*/false);

  FakeRuntime rt(Config(sched, seed));
  const Stream st = ValueOrDie(rt.CreateStream(kHighestPriority));
  const DevPtr table_mem =
      ValueOrDie(rt.Malloc(ResidencyTableBytes(n_blocks, n_pages)));
  const ResidencyTable t = MakeResidencyTable(table_mem, n_blocks, n_pages);
  const DevPtr req = ValueOrDie(rt.Malloc(kMaxReq * sizeof(BlockRequest)));
  const DevPtr scratch = ValueOrDie(rt.Malloc(kMaxReq * 4));
  const DevPtr resolved = ValueOrDie(rt.Malloc(kMaxReq * 4));
  const DevPtr misses = ValueOrDie(rt.Malloc(kMaxReq * sizeof(MissCopy)));
  // The plan ring: two pinned slots, one H2D copy per step.
  auto* ring = static_cast<BlockRequest*>(
      ValueOrDie(rt.HostAllocPinned(2 * kMaxReq * sizeof(BlockRequest))));
  auto* out = static_cast<ResidencyCounters*>(
      ValueOrDie(rt.HostAllocPinned(sizeof(ResidencyCounters))));
  CKV_ASSERT_OK(rt.Launch(InitResidencyOp(t), st));

  int hot = 0;
  int64_t misses_before = 0;
  for (int64_t step = 0; step < 40; ++step) {
    if (rng() % 3 == 0) hot = (hot + 1) % n_blocks;
    BlockRequest* plan = ring + (step % 2) * kMaxReq;
    const int n_req = 1 + rng() % 24;
    CKV_ASSERT_OK(rt.HostWrite(plan, n_req * sizeof(BlockRequest)));
    for (int r = 0; r < n_req; ++r) {
      const int32_t b =
          rng() % 4 == 0 ? rng() % n_blocks : (hot + rng() % 6) % n_blocks;
      int s = 0;
      while (s + 1 < 3 && base[s + 1] <= b) ++s;
      const int32_t c = b - base[s];
      const HeadIndex& h = segs[s]->layer(0).heads[0];
      const int32_t size = h.offsets[c + 1] - h.offsets[c];
      plan[r] = BlockRequest{b, size};
      cache.Ensure(step, *segs[s], 0, 0,
                   BlockRef{s, BlockKind::kCluster, c, 0, size});
    }
    cache.EndStep(step);
    CKV_ASSERT_OK(rt.CopyH2D(req, plan, n_req * sizeof(BlockRequest), st));
    CKV_ASSERT_OK(rt.Launch(
        ResolveResidencyOp(
            t, {req, n_req, step, 4 * kHeadDim, scratch, resolved, misses}),
        st));
    CKV_ASSERT_OK(rt.Launch(EndResidencyStepOp(t, step, cache_steps), st));
    CKV_ASSERT_OK(rt.CopyD2H(out, t.counters, sizeof(*out), st));
    const std::vector<int32_t> pages =
        Download<int32_t>(rt, st, resolved, n_req);  // synchronises st
    CKV_ASSERT_OK(rt.HostRead(out, sizeof(*out)));
    const Counters got{*out};
    ASSERT_EQ(got.k.n_miss, cache.stats().misses - misses_before) << step;
    misses_before = cache.stats().misses;
    ASSERT_TRUE(got == cache.stats()) << "step " << step;
    ASSERT_EQ(got.k.resident_tokens, cache.resident_tokens()) << step;
    ASSERT_EQ(got.k.overflow, 0);
    for (int32_t p : pages) ASSERT_GE(p, 0);  // resident when resolved
  }
  EXPECT_GT(cache.stats().misses, 0);
  if (cache_steps > 0) {
    EXPECT_GT(cache.stats().hits, 0);
  } else {
    EXPECT_EQ(cache.stats().hits, 0);
  }
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
}

TEST(ResidencyTest, StatisticsEqualBlockCache) {
  for (int r : {0, 1, 3}) {
    for (Schedule s :
         {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
      SCOPED_TRACE(testing::Message() << "R " << r << " " << ScheduleName(s));
      RunResidency(s, 5 + r, r);
    }
  }
}

// A page range too small for the step's misses: the overflow flag is set
// (the host turns it into RESOURCE_EXHAUSTED), never a write out of range.
TEST(ResidencyTest, TooFewPagesSetsOverflow) {
  FakeRuntime rt(Config(Schedule::kInline, 1));
  const Stream st = ValueOrDie(rt.CreateStream());
  const ResidencyTable t = MakeResidencyTable(
      ValueOrDie(rt.Malloc(ResidencyTableBytes(4, 3))), 4, 3);
  const std::vector<BlockRequest> plan = {{0, 20}, {1, 30}, {2, 5}};
  const DevPtr req = Upload(rt, st, plan);
  const DevPtr scratch = ValueOrDie(rt.Malloc(3 * 4));
  const DevPtr resolved = ValueOrDie(rt.Malloc(3 * 4));
  const DevPtr misses = ValueOrDie(rt.Malloc(3 * sizeof(MissCopy)));
  CKV_ASSERT_OK(rt.Launch(InitResidencyOp(t), st));
  CKV_ASSERT_OK(rt.Launch(
      ResolveResidencyOp(t, {req, 3, 0, 32, scratch, resolved, misses}), st));
  const auto k = Download<ResidencyCounters>(rt, st, t.counters, 1)[0];
  EXPECT_EQ(k.overflow, 1);
  // Block 0 takes 2 pages; block 1 needs 2 of the 1 left and is skipped;
  // block 2 takes the last one.
  EXPECT_EQ(k.n_miss, 2);
  EXPECT_EQ(k.free_top, 0);
  const std::vector<int32_t> pages = Download<int32_t>(rt, st, resolved, 3);
  EXPECT_GE(pages[0], 0);
  EXPECT_EQ(pages[1], -1);
  EXPECT_GE(pages[2], 0);
}

}  // namespace
}  // namespace ckv::kernels::device
