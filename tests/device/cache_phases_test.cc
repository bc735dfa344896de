// CacheListsBatchOp (kernels/device/cache_phases.h) against the host's
// copy-mode block cache: over consecutive steps of device plans (clusterkv,
// random queries each step), the op's counters equal BlockCache's
// statistics and resident tokens, and every list entry of every planned
// query names an arena row holding exactly the K and V bytes and the
// position that the host's GatherRows (copy mode: the block's arena rows,
// plan order) attends at that place. Segments in position order and
// sorted by cluster, recent pages, R = 0, 1, 3, per query head (four
// plans per item) and per KV head (one), two items per op, a cut list
// capacity; a pool too small reports overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "kernels/device/cache_phases.h"
#include "kernels/device/fake_runtime.h"
#include "kernels/device/op_launchers.h"
#include "model/backend/device/device_block_cache.h"
#include "model/backend/device/device_planner.h"
#include "model/kv/block_cache.h"
#include "model/kv/selection.h"
#include "tests/device/plan_fixture.h"
#include "tests/device/test_util.h"

#ifdef CLUSTERKV_HAVE_CUDA
#include "kernels/cuda/cuda_runtime.h"
#endif

namespace ckv::kernels::device {
namespace {

constexpr int kHeadDim = 16;

struct CacheCase {
  int n_segs = 1;
  int n_plans = 1;
  int budget = 64;
  int recent = 0;
  int cache_steps = 1;
  bool sorted = false;
  bool cut = false;  // list capacity 3
  int n_pages = 0;   // 0: room for every block
  int page_size = 5;
  // The table from a DevicePagedCache sized by StepPagesBound, and the
  // segments growing by one per step (the first step sees one).
  bool paged = false;
};

// One (session, layer, KV head): its segments with random K/V rows, the
// host reference cache and the device table and arena.
struct Side {
  Problem p;
  std::unique_ptr<BlockCache> host;
  std::vector<int32_t> seg_block = {0};
  CacheItem item;
  std::vector<Range> seg_keys, seg_values;
  DevPtr seg_pos, seg_sorted, seg_row_of, row_of;
  int64_t n_row_of = 0;
  std::vector<const Segment*> all;  // every segment (segs: the step's)
  std::unique_ptr<DevicePagedCache> paged;
};

void FillRows(std::mt19937& rng, Segment& s) {
  for (uint16_t* x : {s.mutable_keys(0, 0), s.mutable_values(0, 0)}) {
    for (int64_t i = 0; i < s.size() * kHeadDim; ++i) {
      x[i] = static_cast<uint16_t>(rng());
    }
  }
}

int32_t Pages(int64_t rows) {
  return static_cast<int32_t>((rows + kCachePageRows - 1) / kCachePageRows);
}

Side MakeSide(Runtime& rt, Stream st, std::mt19937& rng, const CacheCase& k) {
  Side d;
  d.p = MakeProblem(rng, k.n_segs, k.n_plans, kHeadDim);
  int32_t all_pages = 0;
  std::vector<int64_t> size, pos, row_of_at;
  std::vector<int32_t> sorted, row_of = {0};
  std::vector<uint64_t> kaddr, vaddr;
  for (auto& s : d.p.owned) {
    FillRows(rng, *s);
    if (k.sorted) SortRowsByCluster(*s, 0);
    const HeadIndex& h = s->layer(0).heads[0];
    const int32_t pages =
        static_cast<int32_t>((s->size() + k.page_size - 1) / k.page_size);
    d.seg_block.push_back(d.seg_block.back() + h.k + pages);
    for (int c = 0; c < h.k; ++c)
      all_pages += Pages(h.offsets[c + 1] - h.offsets[c]);
    all_pages += pages;
    size.push_back(s->size());
    pos.push_back(s->first_pos());
    sorted.push_back(h.rows_by_cluster() ? 1 : 0);
    row_of_at.push_back(h.rows_by_cluster() ? int64_t(row_of.size()) : -1);
    row_of.insert(row_of.end(), h.row_of.begin(), h.row_of.end());
    const int64_t n = s->size() * kHeadDim;
    const std::vector<uint16_t> kr(s->keys(0, 0), s->keys(0, 0) + n);
    const std::vector<uint16_t> vr(s->values(0, 0), s->values(0, 0) + n);
    const DevPtr dk = Upload(rt, st, kr), dv = Upload(rt, st, vr);
    kaddr.push_back(dk.addr);
    vaddr.push_back(dv.addr);
    d.seg_keys.push_back({dk, 2 * n});
    d.seg_values.push_back({dv, 2 * n});
  }
  d.seg_pos = Upload(rt, st, pos);
  d.seg_sorted = Upload(rt, st, sorted);
  d.seg_row_of = Upload(rt, st, row_of_at);
  d.row_of = Upload(rt, st, row_of);
  d.n_row_of = static_cast<int64_t>(row_of.size());
  d.host = std::make_unique<BlockCache>(kHeadDim, k.cache_steps, k.page_size,
                                        /*copy_rows=*/true);
  CacheItem& c = d.item;
  c.n_segs = k.n_segs;
  c.n_blocks = d.seg_block.back();
  c.n_pages = k.n_pages > 0 ? k.n_pages : all_pages;
  c.head_dim = kHeadDim;
  c.cache_steps = k.cache_steps;
  c.bytes_per_token = 4 * kHeadDim;
  c.n_plans = k.n_plans;
  c.seg_size = Upload(rt, st, size).addr;
  c.seg_block = Upload(rt, st, d.seg_block).addr;
  c.seg_keys = Upload(rt, st, kaddr).addr;
  c.seg_values = Upload(rt, st, vaddr).addr;
  const CacheTableImage t = EmptyCacheTable(c.n_blocks, c.n_pages);
  c.slot = Upload(rt, st, t.slot).addr;
  c.last_used = Upload(rt, st, t.last_used).addr;
  c.size = Upload(rt, st, t.size).addr;
  c.next_page = Upload(rt, st, t.next_page).addr;
  c.free_stack = Upload(rt, st, t.free_stack).addr;
  c.counters = Upload(rt, st, std::vector<CacheCounters>{t.counters}).addr;
  const int64_t rows = int64_t{c.n_pages} * kCachePageRows;
  c.keys = ValueOrDie(rt.Malloc(2 * rows * kHeadDim)).addr;
  c.values = ValueOrDie(rt.Malloc(2 * rows * kHeadDim)).addr;
  c.page_pos = ValueOrDie(rt.Malloc(8 * rows)).addr;
  d.all = d.p.segs;
  if (k.paged) {
    d.paged =
        std::make_unique<DevicePagedCache>(rt, st, kHeadDim, k.cache_steps);
  }
  return d;
}

// A paged side's table for this step: its segments so far (one more each
// step), numbered and sized by the cache itself.
void PreparePaged(Runtime& rt, Stream st, Side& d, const KvStoreConfig& c,
                  int step) {
  const size_t n = std::min(d.all.size(), size_t{1} + step);
  d.p.segs.assign(d.all.begin(), d.all.begin() + n);
  const int nq = static_cast<int>(d.p.queries.size());
  ASSERT_TRUE(d.paged->Prepare(d.p.segs, 0, 0, c, nq)) << d.paged->status();
  d.paged->FillItem(&d.item);
  d.item.n_segs = static_cast<int32_t>(n);
  d.item.seg_block = Upload(rt, st, d.paged->seg_block()).addr;
}

// This step's RowListItems of `args` (the plans PlanOn made) into d.item.
CacheHostItem StepItem(Runtime& rt, Stream st, Side& d,
                       const std::vector<SelectArgs>& args, int64_t cap,
                       int64_t step) {
  CacheHostItem h;
  for (const SelectArgs& a : args) {
    RowListTargets t;
    t.seg_pos = d.seg_pos;
    t.seg_sorted = d.seg_sorted;
    t.seg_row_of = d.seg_row_of;
    t.row_of = d.row_of;
    t.n_row_of = d.n_row_of;
    t.rows = ValueOrDie(rt.Malloc(4 * cap));
    t.positions = ValueOrDie(rt.Malloc(8 * cap));
    t.ranges = ValueOrDie(rt.Malloc(16 * int64_t{a.n_segs}));
    t.dest = ValueOrDie(rt.Malloc(8 * a.max_out));
    t.cap = cap;
    h.lists.push_back(RowListItemOf(a, t));
  }
  d.item.lists = Upload(rt, st, h.lists).addr;
  d.item.max_requests = int64_t{d.item.n_plans} * args[0].max_out;
  d.item.requests =
      ValueOrDie(rt.Malloc(d.item.max_requests * sizeof(CacheRequest))).addr;
  d.item.step = step;
  h.item = d.item;
  h.seg_keys = d.seg_keys;
  h.seg_values = d.seg_values;
  return h;
}

// The host's copy-mode rows of the plans (GatherRows: Ensure each block in
// plan order, plan after plan; the block's arena rows begin..begin+count),
// then EndStep; each entry as (position, K row, V row), cut at cap.
struct Entry {
  int64_t pos;
  std::vector<uint16_t> k, v;
  bool operator==(const Entry&) const = default;
};
std::vector<std::vector<Entry>> HostEntries(
    BlockCache& host, const std::vector<const Segment*>& segs,
    const std::vector<DevicePlan>& plans, int64_t cap, int64_t step) {
  std::vector<std::vector<Entry>> out;
  for (const DevicePlan& plan : plans) {
    std::vector<std::pair<int64_t, int64_t>> rows;  // (arena row, position)
    for (const PlannedBlock& b : plan.blocks) {
      const BlockRef ref{
          b.segment,
          b.kind == kPlannedCluster ? BlockKind::kCluster : BlockKind::kPage,
          b.id, b.begin, b.count};
      const int64_t off = host.Ensure(step, *segs[b.segment], 0, 0, ref);
      for (int32_t r = b.begin; r < b.begin + b.count; ++r) {
        rows.emplace_back(off + r, host.positions()[off + r]);
      }
    }
    std::vector<Entry> e;
    for (size_t i = 0; i < rows.size() && int64_t(i) < cap; ++i) {
      const uint16_t* k = host.keys() + rows[i].first * kHeadDim;
      const uint16_t* v = host.values() + rows[i].first * kHeadDim;
      e.push_back({rows[i].second, {k, k + kHeadDim}, {v, v + kHeadDim}});
    }
    out.push_back(std::move(e));
  }
  host.EndStep(step);
  return out;
}

// The device's entries of one list (ranges, rows, positions) over an
// arena of `arena` rows at keys / values, read back.
std::vector<Entry> DeviceEntries(Runtime& rt, Stream st, uint64_t ranges,
                                 uint64_t list_rows, uint64_t positions,
                                 uint64_t arena_keys, uint64_t arena_values,
                                 int64_t arena) {
  const auto range = Download<int64_t>(rt, st, DevPtr{ranges}, 2);
  EXPECT_EQ(range[0], 0);
  const auto rows = Download<int32_t>(rt, st, DevPtr{list_rows}, range[1]);
  const auto pos = Download<int64_t>(rt, st, DevPtr{positions}, range[1]);
  const auto keys =
      Download<uint16_t>(rt, st, DevPtr{arena_keys}, arena * kHeadDim);
  const auto values =
      Download<uint16_t>(rt, st, DevPtr{arena_values}, arena * kHeadDim);
  std::vector<Entry> e;
  for (int64_t i = 0; i < range[1]; ++i) {
    const uint16_t* k = keys.data() + int64_t{rows[i]} * kHeadDim;
    const uint16_t* v = values.data() + int64_t{rows[i]} * kHeadDim;
    e.push_back({pos[i], {k, k + kHeadDim}, {v, v + kHeadDim}});
  }
  return e;
}

// Plan j of item `h`.
std::vector<Entry> DeviceEntries(Runtime& rt, Stream st, const CacheHostItem& h,
                                 size_t j) {
  const threads::RowListItem& it = h.lists[j];
  return DeviceEntries(rt, st, it.ranges, it.rows, it.positions, h.item.keys,
                       h.item.values, int64_t{h.item.n_pages} * kCachePageRows);
}

void ExpectCountersEqual(const CacheCounters& got, const BlockCache& want) {
  const CacheStats& s = want.stats();
  EXPECT_EQ(got.lookups, s.lookups);
  EXPECT_EQ(got.hits, s.hits);
  EXPECT_EQ(got.misses, s.misses);
  EXPECT_EQ(got.hit_tokens, s.hit_tokens);
  EXPECT_EQ(got.miss_tokens, s.miss_tokens);
  EXPECT_EQ(got.h2d_bytes, s.h2d_bytes);
  EXPECT_EQ(got.resident_tokens, want.resident_tokens());
}

// Runs `steps` steps of case k on `rt` (a fake when null) and compares
// with the host cache step by step; returns the hits seen (so a run shows
// it reached the cache's reuse).
int64_t RunCase(Runtime* on, const CacheCase& k, uint64_t seed, int steps) {
  std::unique_ptr<FakeRuntime> fake;
  Runtime* rt = on;
  if (rt == nullptr) {
    fake = std::make_unique<FakeRuntime>(TestConfig(
        seed % 2 ? Schedule::kThreaded : Schedule::kLazy, seed, 256, 20));
    rt = fake.get();
  }
  const OpLaunchers* launch = rt->launchers();
  const Stream st = ValueOrDie(rt->CreateStream());
  std::mt19937 rng(seed);
  std::vector<Side> sides;
  for (int i = 0; i < 2; ++i) sides.push_back(MakeSide(*rt, st, rng, k));
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.budget = k.budget;
  c.recent_tokens = k.recent;
  c.quest_page_size = k.page_size;
  std::normal_distribution<float> g;
  for (int step = 0; step < steps; ++step) {
    std::vector<CacheHostItem> items;
    std::vector<std::vector<std::vector<Entry>>> want;
    for (Side& d : sides) {
      for (auto& q : d.p.queries) {
        for (float& x : q) x = g(rng);
      }
      if (d.paged != nullptr) PreparePaged(*rt, st, d, c, step);
      std::vector<SelectArgs> args;
      const auto plans = PlanOn(*rt, d.p, d.p.queries, c, true, &args);
      int64_t rows = 0;
      for (const Segment* s : d.p.segs) rows += s->size();
      const int64_t cap = k.cut ? 3 : std::min<int64_t>(k.budget, rows);
      items.push_back(StepItem(*rt, st, d, args, cap, step));
      want.push_back(HostEntries(*d.host, d.p.segs, plans, cap, step));
    }
    std::vector<CacheItem> raw;
    CacheListsArgs a;
    for (const CacheHostItem& h : items) {
      raw.push_back(h.item);
      a.max_requests = std::max(a.max_requests, h.item.max_requests);
      a.max_slots = std::max(a.max_slots, h.item.n_plans * h.lists[0].max_out);
    }
    a.items = Upload(*rt, st, raw);
    a.n_items = static_cast<int32_t>(raw.size());
    Op op = CacheListsBatchOp(a, items);
    if (launch != nullptr) {
      op.device_launch = [launch, a](void* x) {
        return launch->CacheListsBatch(a, x);
      };
    }
    EXPECT_TRUE(rt->Launch(std::move(op), st).ok());
    for (size_t i = 0; i < sides.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "step " << step << " item " << i);
      const CacheCounters got = Download<CacheCounters>(
          *rt, st, DevPtr{sides[i].item.counters}, 1)[0];
      if (k.n_pages > 0) {
        if (got.overflow) return -1;
        continue;
      }
      EXPECT_EQ(got.overflow, 0);
      // A table made anew starts empty and counts from zero: the host's
      // statistics are then not its own (its rows still are).
      const DevicePagedCache* paged = sides[i].paged.get();
      if (paged == nullptr || paged->tables_made() == 1) {
        ExpectCountersEqual(got, *sides[i].host);
      }
      for (size_t j = 0; j < items[i].lists.size(); ++j) {
        EXPECT_TRUE(DeviceEntries(*rt, st, items[i], j) == want[i][j])
            << "plan " << j;
      }
    }
  }
  if (fake != nullptr) {
    EXPECT_TRUE(fake->OrderingStatus().ok()) << fake->OrderingStatus();
  }
  int64_t hits = 0;
  for (const Side& d : sides) hits += d.host->stats().hits;
  return hits;
}

void ExpectCacheListsEqualTheHostCache(Runtime* on) {
  int cases = 0;
  int64_t hits = 0;
  for (int n_segs : {1, 3}) {
    for (int n_plans : {1, 4}) {
      for (int budget : {7, 64}) {
        for (int cache_steps : {0, 1, 3}) {
          for (bool sorted : {false, true}) {
            CacheCase k;
            k.n_segs = n_segs;
            k.n_plans = n_plans;
            k.budget = budget;
            k.recent = cases % 3 == 0 ? 5 : 0;
            k.cache_steps = cache_steps;
            k.sorted = sorted;
            k.cut = cases % 5 == 4;
            SCOPED_TRACE(testing::Message()
                         << "segs " << n_segs << " plans " << n_plans
                         << " budget " << budget << " R " << cache_steps
                         << " sorted " << sorted << " recent " << k.recent
                         << " cut " << k.cut);
            hits += RunCase(on, k, 100 + cases, 4);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(hits, 100) << "the steps never reused a cached block";
}

TEST(CacheListsTest, EqualTheHostBlockCache) {
  ExpectCacheListsEqualTheHostCache(nullptr);
}

// A pool of 2 pages cannot hold a 64-token budget's blocks: the op says so
// (the host fails the step) rather than list rows it did not write.
TEST(CacheListsTest, TooFewPagesReportOverflow) {
  CacheCase k;
  k.n_segs = 3;
  k.budget = 64;
  k.n_pages = 2;
  EXPECT_EQ(RunCase(nullptr, k, 7, 1), -1);
}

// DevicePagedCache's tables, sized by StepPagesBound for R + 1 steps and
// made anew as segments arrive, never overflow and keep the host cache's
// statistics and rows over 8 steps (the segments growing from one).
TEST(CacheListsTest, PagedCacheSizedByTheBoundNeverOverflows) {
  int cases = 0;
  for (int n_plans : {1, 4}) {
    for (int budget : {7, 64, 500}) {
      for (int cache_steps : {0, 1, 3}) {
        for (int recent : {0, 9}) {
          CacheCase k;
          k.n_segs = 4;
          k.n_plans = n_plans;
          k.budget = budget;
          k.recent = recent;
          k.cache_steps = cache_steps;
          k.sorted = cases % 2 == 1;
          k.paged = true;
          SCOPED_TRACE(testing::Message()
                       << "plans " << n_plans << " budget " << budget << " R "
                       << cache_steps << " recent " << recent);
          EXPECT_GE(RunCase(nullptr, k, 300 + cases, 8), 0);
          ++cases;
        }
      }
    }
  }
}

// The bound against the pages the device's own plans request: over random
// segments (tiny clusters included) and queries, one step's distinct
// blocks of nq plans never take more pages than StepPagesBound.
TEST(CacheListsTest, StepPagesBoundCoversEveryStep) {
  std::mt19937 rng(404);
  FakeRuntime rt(TestConfig(Schedule::kInline, 1, 256, 0));
  int64_t most = 0, bound_at_most = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int nq = trial % 2 ? 4 : 1;
    Problem p = MakeProblem(rng, 1 + trial % 4, nq, kHeadDim);
    if (trial % 3 == 0) {
      for (auto& s : p.owned) SortRowsByCluster(*s, 0);
    }
    KvStoreConfig c;
    c.policy = KvPolicy::kClusterKv;
    c.budget = 1 + static_cast<int>(rng() % 300);
    c.recent_tokens = static_cast<int>(rng() % 3) * 7;
    c.quest_page_size = 1 + static_cast<int>(rng() % 20);
    const int64_t bound = StepPagesBound(p.segs, 0, 0, c, nq);
    for (int q = 0; q < 5; ++q) {
      std::normal_distribution<float> g;
      for (auto& v : p.queries) {
        for (float& x : v) x = g(rng);
      }
      std::set<std::pair<int, int64_t>> seen;  // (segment, block key)
      int64_t pages = 0;
      for (const DevicePlan& plan : PlanOn(rt, p, p.queries, c, true)) {
        for (const PlannedBlock& b : plan.blocks) {
          const BlockKind kind = b.kind == kPlannedCluster ? BlockKind::kCluster
                                                           : BlockKind::kPage;
          const int64_t key = 2 * int64_t{b.id} + (b.kind == kPlannedPage);
          if (!seen.insert({b.segment, key}).second) continue;
          const int32_t size = BlockSize(*p.segs[b.segment], 0, 0, kind, b.id,
                                         c.quest_page_size);
          pages += Pages(size);
        }
      }
      EXPECT_LE(pages, bound) << "trial " << trial;
      if (pages > most) {
        most = pages;
        bound_at_most = bound;
      }
    }
  }
  EXPECT_GT(most, 10) << "the plans never needed many pages";
  EXPECT_GT(bound_at_most, 0);
}

// The DevicePlanner with copy-mode requests (lists naming its caches): its
// call runs cache_lists after the row lists, and over 6 steps the lists
// over the caches' arenas hold the host copy-mode rows of the plans it
// returns; both GQA modes, R = 0 and 2, segments in both storage orders.
TEST(CacheListsTest, PlannerListsCopyModeOverItsCaches) {
  int cases = 0;
  for (GqaSelection gqa :
       {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
    for (int cache_steps : {0, 2}) {
      SCOPED_TRACE(testing::Message()
                   << "per_kv " << (gqa == GqaSelection::kPerKvHead) << " R "
                   << cache_steps);
      std::mt19937 rng(500 + cases);
      FakeRuntime rt(TestConfig(Schedule::kThreaded, 9 + cases, 256, 20));
      const Stream st = ValueOrDie(rt.CreateStream());
      const int n_q = 4;
      Problem p = MakeProblem(rng, 3, n_q, kHeadDim);
      std::vector<const uint16_t*> keys, values;
      for (size_t i = 0; i < p.owned.size(); ++i) {
        Segment& seg = *p.owned[i];
        FillRows(rng, seg);
        if (i % 2 == 1) SortRowsByCluster(seg, 0);
        const int64_t n = seg.size() * kHeadDim;
        const DevPtr k = Upload(
            rt, st, std::vector<uint16_t>(seg.keys(0, 0), seg.keys(0, 0) + n));
        const DevPtr v = Upload(
            rt, st,
            std::vector<uint16_t>(seg.values(0, 0), seg.values(0, 0) + n));
        keys.push_back(reinterpret_cast<const uint16_t*>(k.addr));
        values.push_back(reinterpret_cast<const uint16_t*>(v.addr));
      }
      KvShape shape;
      shape.n_layers = 1;
      shape.n_heads = n_q;
      shape.n_kv_heads = 1;
      shape.head_dim = kHeadDim;
      KvStoreConfig c;
      c.policy = KvPolicy::kClusterKv;
      c.budget = 40;
      c.recent_tokens = 5;
      c.quest_page_size = 5;
      c.gqa_selection = gqa;
      c.cache_steps = cache_steps;
      DevicePlanner planner(rt, nullptr, int64_t{1} << 20);
      planner.EnableRowLists(true);
      auto cache = planner.NewBlockCache(kHeadDim, cache_steps);
      ASSERT_NE(cache, nullptr);
      BlockCache host(kHeadDim, cache_steps, c.quest_page_size, true);
      const int nq = gqa == GqaSelection::kPerKvHead ? 1 : n_q;
      std::normal_distribution<float> g;
      for (int step = 0; step < 6; ++step) {
        SCOPED_TRACE(testing::Message() << "step " << step);
        std::vector<float> q(size_t{1} * n_q * kHeadDim);
        for (float& x : q) x = g(rng);
        DeviceRowLists lists;
        lists.caches = {cache.get()};
        lists.cache_step = step;
        lists.seg_keys = keys;
        lists.seg_values = values;
        std::vector<HeadPlan> plans(n_q);
        bool planned = false;
        planner.Queue(c, shape, p.segs, 0, q.data(), plans.data(), &planned,
                      &lists);
        planner.RunQueued();
        ASSERT_TRUE(planned && lists.valid) << planner.status();
        ASSERT_EQ(lists.arena_keys.size(), 1u);
        std::vector<DevicePlan> dev_plans(nq);
        for (int j = 0; j < nq; ++j) {
          for (const BlockRef& b : plans[j].blocks) {
            dev_plans[j].blocks.push_back(
                {b.segment,
                 b.kind == BlockKind::kCluster ? kPlannedCluster : kPlannedPage,
                 b.id, b.begin, b.count});
          }
        }
        const auto want = HostEntries(host, p.segs, dev_plans, lists.cap, step);
        for (int j = 0; j < nq; ++j) {
          EXPECT_TRUE(DeviceEntries(rt, st, lists.ranges[j], lists.rows[j],
                                    lists.positions[j], lists.arena_keys[0],
                                    lists.arena_values[0],
                                    lists.arena_rows[0]) == want[j])
              << "query " << j;
        }
      }
      EXPECT_EQ(planner.cache_ops(), 6);
      if (cache_steps > 0) {
        EXPECT_GT(host.stats().hits, 0);
      } else {  // every block leaves at its step's end
        EXPECT_EQ(host.stats().hits, 0);
      }
      EXPECT_TRUE(planner.status().ok()) << planner.status();
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      ++cases;
    }
  }
}

TEST(CacheListsTest, CudaEqualsTheHostBlockCache) {
#ifdef CLUSTERKV_HAVE_CUDA
  auto rt = cuda::CudaRuntime::Create(0);
  if (!rt.ok()) GTEST_SKIP() << rt.status().message();
  ExpectCacheListsEqualTheHostCache(rt->get());
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

}  // namespace
}  // namespace ckv::kernels::device
