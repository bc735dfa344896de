// SelectBlocksOp (kernels/device/selection_phases.h) on the fake against the
// product policy: on random segments and clusters with planted ties, NaN and
// ±inf scores, for every query of a GQA group (PlanEach) and for the group's
// summed query (Plan, per_kv_head), with and without recent_tokens, the
// device plan equals clusterkv's HeadPlan block for block. Scores come from
// ScoreClustersOp (bit-equal to the CPU's, phases_test), so the whole
// device-side selection of one (session, layer, KV head) is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/device/fake_runtime.h"
#include "kernels/device/op_launchers.h"
#include "kernels/device/phases.h"
#include "kernels/device/selection_phases.h"
#include "model/backend/device/device_planner.h"
#include "model/kv/kv_config.h"
#include "model/kv/policies/registry.h"
#include "model/kv/segment.h"
#include "model/kv/selection.h"
#include "tests/device/plan_fixture.h"
#include "tests/device/test_util.h"

#ifdef CLUSTERKV_HAVE_CUDA
#include "kernels/cuda/cuda_runtime.h"
#endif

namespace ckv::kernels::device {
namespace {

// The fake (its ordering checker clean after the plans).
std::vector<DevicePlan> PlanOnDevice(
    const Problem& p, const std::vector<std::vector<float>>& queries,
    const KvStoreConfig& c, Schedule sched, uint64_t seed, bool batched) {
  FakeRuntime rt(TestConfig(sched, seed, 32, 20));
  std::vector<DevicePlan> plans = PlanOn(rt, p, queries, c, batched);
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
  return plans;
}

void ExpectSamePlan(const HeadPlan& want, const DevicePlan& got) {
  ASSERT_EQ(got.totals.blocks, static_cast<int64_t>(want.blocks.size()));
  EXPECT_EQ(got.totals.tokens, want.tokens);
  for (size_t i = 0; i < want.blocks.size(); ++i) {
    const BlockRef& w = want.blocks[i];
    const PlannedBlock& g = got.blocks[i];
    SCOPED_TRACE(testing::Message() << "block " << i);
    EXPECT_EQ(g.segment, w.segment);
    EXPECT_EQ(g.kind,
              w.kind == BlockKind::kCluster ? kPlannedCluster : kPlannedPage);
    EXPECT_EQ(g.id, w.id);
    EXPECT_EQ(g.begin, w.begin);
    EXPECT_EQ(g.count, w.count);
  }
}

// The plans of `plan_on(problem, queries, config, case)` against
// clusterkv's, over random problems with planted ties, NaN and inf.
template <class PlanFn>
void ExpectClusterKvPlans(PlanFn plan_on) {
  std::mt19937 rng(2024);
  int cases = 0, planted = 0;
  for (int n_segs : {1, 3}) {
    for (int head_dim : {8, 67}) {
      for (int budget : {1, 7, 64, 1000}) {
        for (int recent : {0, 5, 33}) {
          if (recent > budget) continue;
          for (int n_q : {1, 4}) {
            SCOPED_TRACE(testing::Message()
                         << "segs " << n_segs << " dim " << head_dim
                         << " budget " << budget << " recent " << recent
                         << " n_q " << n_q);
            const Problem p = MakeProblem(rng, n_segs, n_q, head_dim);
            KvStoreConfig c;
            c.policy = KvPolicy::kClusterKv;
            c.budget = budget;
            c.recent_tokens = recent;
            c.quest_page_size = cases % 2 ? 16 : 5;
            auto policy = MakePolicy(c);
            ASSERT_NE(policy, nullptr);
            const PlanContext ctx{&p.segs, 0, 0, head_dim};
            std::vector<const float*> qs;
            for (const auto& q : p.queries) qs.push_back(q.data());
            ++cases;
            // Per query head: PlanEach.
            std::vector<HeadPlan> each(n_q);
            policy->PlanEach(ctx, qs.data(), n_q, each.data());
            const auto dev = plan_on(p, p.queries, c, cases);
            for (int j = 0; j < n_q; ++j) ExpectSamePlan(each[j], dev[j]);
            // Per KV head: the group's summed query (Plan), summed as the
            // policy sums it.
            HeadPlan shared;
            policy->Plan(ctx, qs.data(), n_q, &shared);
            std::vector<float> sum(head_dim, 0.0f);
            for (const auto& q : p.queries) {
              for (int d = 0; d < head_dim; ++d) sum[d] += q[d];
            }
            ExpectSamePlan(shared, plan_on(p, {sum}, c, cases)[0]);
            for (const Segment* s : p.segs) {
              const auto& mu = s->layer(0).heads[0].centroids;
              planted += std::any_of(mu.begin(), mu.end(), [](float x) {
                return !std::isfinite(x) || std::fabs(x) > 7e4f;
              });
            }
          }
        }
      }
    }
  }
  EXPECT_GT(planted, 10) << "the NaN / inf centroids were not planted";
}

TEST(SelectBlocksTest, EqualsClusterKvPlans) {
  ExpectClusterKvPlans([](const Problem& p,
                          const std::vector<std::vector<float>>& queries,
                          const KvStoreConfig& c, int cases) {
    return PlanOnDevice(p, queries, c,
                        cases % 2 ? Schedule::kThreaded : Schedule::kLazy,
                        cases, false);
  });
}

// The batch ops (one score op over every segment, one select op over every
// query, each query its own scratch): the same plans.
TEST(SelectBlocksTest, BatchEqualsClusterKvPlans) {
  ExpectClusterKvPlans([](const Problem& p,
                          const std::vector<std::vector<float>>& queries,
                          const KvStoreConfig& c, int cases) {
    return PlanOnDevice(p, queries, c,
                        cases % 2 ? Schedule::kLazy : Schedule::kThreaded,
                        cases, true);
  });
}

// One segment of 10 rows, blocks {0..3}, {4..6} (malformed: its end before
// its start), {7..9}; scores rank block 1 first, then 2, 0; budget 100.
// Its plan: block 2 (3 rows), then block 0 (4), 7 tokens.
SelectArgs SmallProblem(Runtime& rt, Stream st) {
  SelectArgs a;
  a.n = 3;
  a.scores = Upload(rt, st, std::vector<float>{1.0f, 3.0f, 2.0f});
  a.seg_first = Upload(rt, st, std::vector<int64_t>{0, 3});
  a.seg_size = Upload(rt, st, std::vector<int64_t>{10});
  a.n_segs = 1;
  a.member_first = Upload(rt, st, std::vector<int64_t>{0, 4, 7, 10});
  a.member_last = Upload(rt, st, std::vector<int64_t>{4, 2, 10});
  std::vector<int32_t> rows(10);
  for (int32_t r = 0; r < 10; ++r) rows[r] = r;
  a.members = Upload(rt, st, rows);
  a.n_members = 10;
  a.budget = 100;
  a.recent_tokens = 0;
  a.page_size = 16;
  return a;
}

// Hand-made inputs the policy never produces: a block whose member range
// is malformed attends nothing and the others are planned (the budget is
// then never filled, so the last block with rows ends the plan); a plan
// past max_out is refused with nothing written past it; pages of no rows
// refuse the plan. Both forms, three schedules.
TEST(SelectBlocksTest, MalformedBlocksAndOverflow) {
  for (Schedule sched :
       {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    for (bool batched : {false, true}) {
      SCOPED_TRACE(testing::Message() << static_cast<int>(sched) << batched);
      FakeRuntime rt(TestConfig(sched, 5, 8, 20));
      const Stream st = ValueOrDie(rt.CreateStream());
      SelectArgs a = SmallProblem(rt, st);
      auto run = [&](int64_t max_out) {
        a.max_out = max_out;
        a.scratch = ValueOrDie(rt.Malloc(SelectScratchBytes(a.n, a.n_segs)));
        a.out = Upload(rt, st, std::vector<PlannedBlock>(4, PlannedBlock{}));
        a.totals = ValueOrDie(rt.Malloc(sizeof(PlanTotals)));
        Op op = SelectBlocksOp(a);
        if (batched) {
          const std::vector<threads::SelectItem> items = {ItemOf(a)};
          op = SelectBlocksBatchOp({Upload(rt, st, items), 1, a.n}, items);
        }
        EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
        return std::make_pair(Download<PlanTotals>(rt, st, a.totals, 1)[0],
                              Download<PlannedBlock>(rt, st, a.out, 4));
      };
      const auto [totals, out] = run(4);
      EXPECT_EQ(totals.blocks, 2);
      EXPECT_EQ(totals.tokens, 7);
      EXPECT_EQ(totals.budget, 10);
      EXPECT_EQ(out[0].id, 2);
      EXPECT_EQ(out[0].count, 3);
      EXPECT_EQ(out[1].id, 0);
      EXPECT_EQ(out[1].count, 4);
      EXPECT_EQ(out[2].count, 0);  // untouched
      const auto [refused, partial] = run(1);
      EXPECT_EQ(refused.blocks, -1);
      EXPECT_EQ(partial[1].count, 0);  // nothing past max_out
      a.page_size = 0;  // a batch's items are not validated on the host
      const auto [no_pages, untouched] = run(4);
      EXPECT_EQ(no_pages.blocks, -1);
      EXPECT_EQ(untouched[0].count, 0);
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    }
  }
}

// n_items copies of SmallProblem in one batch, each with its own scratch
// and outputs: every item gets its plan. 70,000 items: more than a CUDA
// grid's y dimension holds (65,535: the kernels then run the batch in
// chunks). On the fake its 630,000 declared ranges are looked up through
// indexes (the op's ranges and the ordering checker's history: 355 s
// before them, ~5 s now).
void ExpectEveryItemPlanned(Runtime& rt, int32_t n_items) {
  const Stream st = ValueOrDie(rt.CreateStream());
  SelectArgs a = SmallProblem(rt, st);
  a.max_out = 2;
  const int64_t scratch = SelectScratchBytes(a.n, a.n_segs);
  const DevPtr scratch_all = ValueOrDie(rt.Malloc(scratch * n_items));
  const DevPtr out_all =
      ValueOrDie(rt.Malloc(int64_t{n_items} * 2 * sizeof(PlannedBlock)));
  const DevPtr totals_all =
      ValueOrDie(rt.Malloc(int64_t{n_items} * sizeof(PlanTotals)));
  std::vector<threads::SelectItem> items;
  for (int64_t i = 0; i < n_items; ++i) {
    a.scratch = scratch_all + i * scratch;
    a.out = out_all + i * 2 * static_cast<int64_t>(sizeof(PlannedBlock));
    a.totals = totals_all + i * static_cast<int64_t>(sizeof(PlanTotals));
    items.push_back(ItemOf(a));
  }
  const SelectBatchArgs b{Upload(rt, st, items), n_items, a.n};
  Op op = SelectBlocksBatchOp(b, items);
  if (const OpLaunchers* k = rt.launchers()) {
    op.device_launch = [k, b](void* x) { return k->SelectBlocksBatch(b, x); };
  }
  ASSERT_TRUE(rt.Launch(std::move(op), st).ok());
  const std::vector<PlanTotals> totals =
      Download<PlanTotals>(rt, st, totals_all, n_items);
  const std::vector<PlannedBlock> out =
      Download<PlannedBlock>(rt, st, out_all, int64_t{n_items} * 2);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    wrong += totals[i].blocks != 2 || totals[i].tokens != 7 ||
             out[2 * i].id != 2 || out[2 * i].count != 3 ||
             out[2 * i + 1].id != 0 || out[2 * i + 1].count != 4;
  }
  EXPECT_EQ(wrong, 0) << "of " << n_items << " items";
}

TEST(SelectBlocksTest, EveryItemOfABatchIsPlanned) {
  FakeRuntime rt(TestConfig(Schedule::kLazy, 3, 96, 0));
  ExpectEveryItemPlanned(rt, 70000);
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
}

// A planner's plan in the device's form, for ExpectSamePlan.
DevicePlan AsDevicePlan(const HeadPlan& h) {
  DevicePlan d;
  d.totals.blocks = static_cast<int64_t>(h.blocks.size());
  d.totals.tokens = h.tokens;
  for (const BlockRef& b : h.blocks) {
    d.blocks.push_back(
        {b.segment,
         b.kind == BlockKind::kCluster ? kPlannedCluster : kPlannedPage, b.id,
         b.begin, b.count});
  }
  return d;
}

// The DevicePlanner with queries from the host (PlanLayer: its fallback
// form, where the backend's calls gather them on the device): per query
// head, each query's plan is PlanEach's; per KV head, every head gets the
// plan of the group's queries summed on the host by GatherQuery, which is
// the policy's Plan.
TEST(SelectBlocksTest, PlannerWithHostQueriesEqualsClusterKvPlans) {
  std::mt19937 rng(77);
  for (int n_segs : {1, 3}) {
    for (int budget : {7, 64, 1000}) {
      const int n_q = 4, head_dim = 67;
      SCOPED_TRACE(testing::Message()
                   << "segs " << n_segs << " budget " << budget);
      const Problem p = MakeProblem(rng, n_segs, n_q, head_dim);
      KvShape shape;
      shape.n_layers = 1;
      shape.n_heads = n_q;
      shape.n_kv_heads = 1;
      shape.head_dim = head_dim;
      std::vector<float> q_all;
      std::vector<const float*> qs;
      for (const auto& q : p.queries) {
        q_all.insert(q_all.end(), q.begin(), q.end());
      }
      for (int j = 0; j < n_q; ++j) qs.push_back(q_all.data() + j * head_dim);
      for (GqaSelection gqa :
           {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
        KvStoreConfig c;
        c.policy = KvPolicy::kClusterKv;
        c.budget = budget;
        c.recent_tokens = 5;
        c.gqa_selection = gqa;
        auto policy = MakePolicy(c);
        ASSERT_NE(policy, nullptr);
        const PlanContext ctx{&p.segs, 0, 0, head_dim};
        std::vector<HeadPlan> want(n_q);
        if (gqa == GqaSelection::kPerQueryHead) {
          policy->PlanEach(ctx, qs.data(), n_q, want.data());
        } else {
          policy->Plan(ctx, qs.data(), n_q, &want[0]);
          for (int j = 1; j < n_q; ++j) want[j] = want[0];
        }
        FakeRuntime rt(TestConfig(Schedule::kThreaded, budget, 32, 20));
        DevicePlanner planner(rt, nullptr, int64_t{1} << 20);
        std::vector<HeadPlan> got(n_q);
        ASSERT_TRUE(
            planner.PlanLayer(c, shape, p.segs, 0, q_all.data(), got.data()));
        for (int j = 0; j < n_q; ++j) {
          ExpectSamePlan(want[j], AsDevicePlan(got[j]));
        }
        EXPECT_EQ(planner.op_counts().gather_ops, 0);
        EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      }
    }
  }
}

// What row_lists writes for one planned query: the entries, and per
// segment {first, n}.
struct Lists {
  std::vector<int32_t> rows;
  std::vector<int64_t> positions, ranges;
};

// The row lists of the plans `args` (PlanOn's, already run) with `cap`
// entries each: one RowListsBatchOp over every query, read back.
std::vector<Lists> ListsOn(Runtime& rt, const Problem& p,
                           const std::vector<SelectArgs>& args, int64_t cap) {
  const OpLaunchers* k = rt.launchers();
  const Stream st = ValueOrDie(rt.CreateStream());
  std::vector<int64_t> seg_pos, seg_row_of;
  std::vector<int32_t> sorted, row_of = {0};  // a pool of one or more
  for (const Segment* s : p.segs) {
    const HeadIndex& h = s->layer(0).heads[0];
    seg_pos.push_back(s->first_pos());
    sorted.push_back(h.rows_by_cluster() ? 1 : 0);
    seg_row_of.push_back(h.rows_by_cluster() ? int64_t(row_of.size()) : -1);
    row_of.insert(row_of.end(), h.row_of.begin(), h.row_of.end());
  }
  const DevPtr pos = Upload(rt, st, seg_pos), srt = Upload(rt, st, sorted);
  const DevPtr ro_at = Upload(rt, st, seg_row_of), ro = Upload(rt, st, row_of);
  std::vector<threads::RowListItem> items;
  for (const SelectArgs& a : args) {
    RowListTargets t;
    t.seg_pos = pos;
    t.seg_sorted = srt;
    t.seg_row_of = ro_at;
    t.row_of = ro;
    t.n_row_of = static_cast<int64_t>(row_of.size());
    t.rows = ValueOrDie(rt.Malloc(4 * cap));
    t.positions = ValueOrDie(rt.Malloc(8 * cap));
    t.ranges = ValueOrDie(rt.Malloc(16 * int64_t{a.n_segs}));
    t.dest = ValueOrDie(rt.Malloc(8 * a.max_out));
    t.cap = cap;
    items.push_back(RowListItemOf(a, t));
  }
  RowListsBatchArgs b;
  b.items = Upload(rt, st, items);
  b.n_items = static_cast<int32_t>(items.size());
  for (const auto& it : items) b.max_slots = std::max(b.max_slots, it.max_out);
  Op op = RowListsBatchOp(b, items);
  if (k != nullptr) {
    op.device_launch = [k, b](void* x) { return k->RowListsBatch(b, x); };
  }
  EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  std::vector<Lists> out;
  for (const auto& it : items) {
    Lists l;
    l.ranges = Download<int64_t>(rt, st, DevPtr{it.ranges}, 2 * it.n_segs);
    int64_t used = 0;
    for (int s = 0; s < it.n_segs; ++s) {
      used = std::max(used, l.ranges[2 * s] + l.ranges[2 * s + 1]);
    }
    l.rows = Download<int32_t>(rt, st, DevPtr{it.rows}, used);
    l.positions = Download<int64_t>(rt, st, DevPtr{it.positions}, used);
    out.push_back(std::move(l));
  }
  return out;
}

// The host store's rows of `plan` (GatherRows: per segment in segment
// order, its blocks in plan order, AppendBlockRows) and their positions,
// truncated to `cap` entries.
Lists ExpectedLists(const Problem& p, const DevicePlan& plan, int page_size,
                    int64_t cap) {
  std::vector<std::vector<int32_t>> per(p.segs.size());
  for (const PlannedBlock& b : plan.blocks) {
    AppendBlockRows(
        *p.segs[b.segment], 0, 0,
        b.kind == kPlannedCluster ? BlockKind::kCluster : BlockKind::kPage,
        b.id, b.begin, b.count, page_size, &per[b.segment]);
  }
  Lists l;
  for (size_t s = 0; s < per.size(); ++s) {
    const int64_t first = std::min<int64_t>(l.rows.size(), cap);
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(per[s].size()), cap - first);
    l.ranges.push_back(first);
    l.ranges.push_back(n);
    for (int64_t i = 0; i < n; ++i) {
      l.rows.push_back(per[s][i]);
      l.positions.push_back(p.segs[s]->first_pos() +
                            p.segs[s]->SegmentRow(0, 0, per[s][i]));
    }
  }
  return l;
}

// Row lists built on the device from device plans equal the host store's
// rows of the same plans: segments in position order (stored rows =
// members) and sorted by cluster (stored rows contiguous per cluster,
// positions through the members; recent pages' stored rows through
// row_of), with and without recent pages, clusterkv's plans with
// ties, NaN and inf, capacity the planner's (min(budget, rows)) and a cut
// one (3 entries); two schedules.
void ExpectListsOfPlans(Runtime* on, bool check_ordering) {
  std::mt19937 rng(91);
  int cases = 0, sorted_cases = 0;
  for (int n_segs : {1, 3}) {
    for (int budget : {1, 7, 64, 1000}) {
      for (int recent : {0, 5}) {
        for (bool sort : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "segs " << n_segs << " budget " << budget
                       << " recent " << recent << " sorted " << sort);
          Problem p = MakeProblem(rng, n_segs, 4, 16);
          if (sort) {
            for (auto& s : p.owned) SortRowsByCluster(*s, 0);
            ++sorted_cases;
          }
          KvStoreConfig c;
          c.policy = KvPolicy::kClusterKv;
          c.budget = budget;
          c.recent_tokens = recent;
          c.quest_page_size = 5;
          int64_t rows = 0;
          for (const Segment* s : p.segs) rows += s->size();
          for (int64_t cap : {std::min<int64_t>(budget, rows), int64_t{3}}) {
            ++cases;
            std::unique_ptr<FakeRuntime> fake;
            Runtime* rt = on;
            if (rt == nullptr) {
              fake = std::make_unique<FakeRuntime>(
                  TestConfig(cases % 2 ? Schedule::kThreaded : Schedule::kLazy,
                             cases, 32, 20));
              rt = fake.get();
            }
            std::vector<SelectArgs> args;
            const auto plans = PlanOn(*rt, p, p.queries, c, true, &args);
            const auto lists = ListsOn(*rt, p, args, cap);
            for (size_t j = 0; j < plans.size(); ++j) {
              const Lists want =
                  ExpectedLists(p, plans[j], c.quest_page_size, cap);
              EXPECT_EQ(lists[j].ranges, want.ranges) << "query " << j;
              EXPECT_EQ(lists[j].rows, want.rows) << "query " << j;
              EXPECT_EQ(lists[j].positions, want.positions) << "query " << j;
            }
            if (check_ordering) {
              EXPECT_TRUE(fake->OrderingStatus().ok())
                  << fake->OrderingStatus();
            }
          }
        }
      }
    }
  }
  EXPECT_GT(sorted_cases, 4);
  EXPECT_GT(cases, 40);
}

TEST(RowListsTest, EqualTheHostRowsOfThePlans) {
  ExpectListsOfPlans(nullptr, true);
}

// The same on CUDA: score_clusters and select_blocks run their kernels
// (kernels/cuda/selection_ops.cu, the same thread bodies), every other case
// as the batch kernels.
TEST(SelectBlocksTest, CudaEqualsClusterKvPlans) {
#ifdef CLUSTERKV_HAVE_CUDA
  auto rt = cuda::CudaRuntime::Create(0);
  if (!rt.ok()) GTEST_SKIP() << rt.status().message();
  ExpectClusterKvPlans(
      [&rt](const Problem& p, const std::vector<std::vector<float>>& queries,
            const KvStoreConfig& c,
            int cases) { return PlanOn(**rt, p, queries, c, cases % 2 == 1); });
  ExpectEveryItemPlanned(**rt, 70000);
  ExpectListsOfPlans(rt->get(), false);
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

}  // namespace
}  // namespace ckv::kernels::device
