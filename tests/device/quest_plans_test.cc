// Quest's plans on the device (threads::QuestPageScore, score items of kind
// kScoreQuestPages, select_blocks in mode kSelectTopPages, the
// DevicePlanner) against the product policy (model/kv/policies/quest.cc)
// on the fake: random segments of several sizes (the last page of a
// segment shorter), odd head dims, budgets that are not multiples of the
// page size, page bounds planted as ties (within and across segments),
// zeros (±0 scores), ±inf and NaN; per query head (PlanEach) and per KV
// head (Plan over the group's queries, their page scores summed). Plans
// must be equal block for block, the page scores bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
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
#include "tests/kernels/test_util.h"

#ifdef CLUSTERKV_HAVE_CUDA
#include "kernels/cuda/cuda_runtime.h"
#endif

namespace ckv::kernels::device {
namespace {

using cpu::KernelSet;
using cpu::testing::AvailableKernelSets;
using cpu::testing::ScopedKernels;

struct QuestProblem {
  std::vector<std::unique_ptr<Segment>> owned;
  std::vector<const Segment*> segs;
  std::vector<float> queries;  // [n_q][head_dim]
  int n_q = 0, head_dim = 0, page_size = 0;
};

// Page p's bounds (min then max, head_dim each) planted: a copy of an
// earlier page's (a tie, maybe of another segment), all zero, one ±inf
// or NaN element, or random.
void PlantPage(std::mt19937& rng, int hd, const std::vector<float>& earlier,
               float* mn, float* mx) {
  std::normal_distribution<float> g;
  for (int d = 0; d < hd; ++d) {
    const float a = g(rng), b = g(rng);
    mn[d] = std::min(a, b);
    mx[d] = std::max(a, b);
  }
  switch (rng() % 10) {
    case 0:
    case 1:  // a tie with an earlier page
      if (!earlier.empty()) {
        const size_t pages = earlier.size() / (2 * hd);
        const float* e = earlier.data() + (rng() % pages) * 2 * hd;
        std::copy_n(e, hd, mn);
        std::copy_n(e + hd, hd, mx);
      }
      break;
    case 2:  // score ±0 for every query
      std::fill_n(mn, hd, -0.0f);
      std::fill_n(mx, hd, 0.0f);
      break;
    case 3:
      mx[rng() % hd] = INFINITY;
      break;
    case 4:
      mn[rng() % hd] = NAN;
      break;
    default:
      break;
  }
}

// n_segs segments of 1..70 rows with a page index on (layer 0, KV head 0);
// `earlier` collects every page's bounds (ties across segments).
QuestProblem MakeQuestProblem(std::mt19937& rng, int n_segs, int n_q, int hd,
                              int page_size) {
  QuestProblem p;
  p.n_q = n_q;
  p.head_dim = hd;
  p.page_size = page_size;
  KvShape shape;
  shape.n_layers = 1;
  shape.n_heads = n_q;
  shape.n_kv_heads = 1;
  shape.head_dim = hd;
  std::vector<float> earlier;
  int64_t pos = 0;
  for (int s = 0; s < n_segs; ++s) {
    const int n = 1 + static_cast<int>(rng() % 70);
    auto seg = std::make_unique<Segment>(Segment::NextUid(), pos, n, shape);
    pos += n;
    HeadIndex& h = seg->layer(0).heads.emplace_back();
    const int pages = (n + page_size - 1) / page_size;
    h.page_min.resize(size_t{1} * pages * hd);
    h.page_max.resize(size_t{1} * pages * hd);
    for (int pg = 0; pg < pages; ++pg) {
      float* mn = h.page_min.data() + size_t{1} * pg * hd;
      float* mx = h.page_max.data() + size_t{1} * pg * hd;
      PlantPage(rng, hd, earlier, mn, mx);
      earlier.insert(earlier.end(), mn, mn + hd);
      earlier.insert(earlier.end(), mx, mx + hd);
    }
    p.segs.push_back(seg.get());
    p.owned.push_back(std::move(seg));
  }
  std::normal_distribution<float> g;
  p.queries.resize(size_t{1} * n_q * hd);
  for (float& x : p.queries) x = g(rng);
  return p;
}

// The quest policy's plans: per query head (PlanEach), or the group's
// (Plan) in every head.
std::vector<HeadPlan> PolicyPlans(const QuestProblem& p,
                                  const KvStoreConfig& c) {
  auto policy = MakePolicy(c);
  EXPECT_NE(policy, nullptr);
  const PlanContext ctx{&p.segs, 0, 0, p.head_dim};
  std::vector<const float*> qs;
  for (int j = 0; j < p.n_q; ++j) {
    qs.push_back(p.queries.data() + size_t{1} * j * p.head_dim);
  }
  std::vector<HeadPlan> want(p.n_q);
  if (c.gqa_selection == GqaSelection::kPerQueryHead) {
    policy->PlanEach(ctx, qs.data(), p.n_q, want.data());
    return want;
  }
  policy->Plan(ctx, qs.data(), p.n_q, &want[0]);
  for (int j = 1; j < p.n_q; ++j) want[j] = want[0];
  return want;
}

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

void ExpectSamePlan(const HeadPlan& want, const DevicePlan& got) {
  ASSERT_EQ(got.totals.blocks, static_cast<int64_t>(want.blocks.size()));
  EXPECT_EQ(got.totals.tokens, want.tokens);
  for (size_t i = 0; i < want.blocks.size(); ++i) {
    const BlockRef& w = want.blocks[i];
    const PlannedBlock& g = got.blocks[i];
    SCOPED_TRACE(testing::Message() << "block " << i);
    EXPECT_EQ(g.segment, w.segment);
    EXPECT_EQ(g.kind, kPlannedPage);
    EXPECT_EQ(w.kind, BlockKind::kPage);
    EXPECT_EQ(g.id, w.id);
    EXPECT_EQ(g.begin, w.begin);
    EXPECT_EQ(g.count, w.count);
  }
}

// The device's plans from the batch ops alone, as the planner launches
// them: one score op (quest items over every segment's bounds in one
// pool), one select op (every plan, kSelectTopPages).
std::vector<DevicePlan> QuestPlanOn(Runtime& rt, const QuestProblem& p,
                                    const KvStoreConfig& c) {
  const Stream st = ValueOrDie(rt.CreateStream());
  const int hd = p.head_dim;
  const bool shared = c.gqa_selection == GqaSelection::kPerKvHead;
  const int plans = shared ? 1 : p.n_q;
  std::vector<float> bounds;  // per segment: page_min, then page_max
  std::vector<int64_t> seg_first = {0}, seg_size, at;
  for (const Segment* s : p.segs) {
    const HeadIndex& h = s->layer(0).heads[0];
    at.push_back(static_cast<int64_t>(bounds.size()));
    bounds.insert(bounds.end(), h.page_min.begin(), h.page_min.end());
    bounds.insert(bounds.end(), h.page_max.begin(), h.page_max.end());
    seg_first.push_back(seg_first.back() +
                        static_cast<int64_t>(h.page_min.size()) / hd);
    seg_size.push_back(s->size());
  }
  const int64_t total = seg_first.back();
  std::vector<ScoreItem> items;
  std::vector<int64_t> base = {0};
  for (size_t s = 0; s < p.segs.size(); ++s) {
    for (int j = 0; j < plans; ++j) {
      ScoreItem it;
      it.kind = threads::kScoreQuestPages;
      it.q_offset = shared ? 0 : int64_t{j} * hd;
      it.n_q = shared ? p.n_q : 1;
      it.panel_offset = 2 * at[s];  // uint16 elements
      it.score_offset = j * total + seg_first[s];
      it.n = static_cast<int32_t>(seg_first[s + 1] - seg_first[s]);
      it.ld = static_cast<int32_t>(total);
      items.push_back(it);
      base.push_back(base.back() + threads::ScoreItemThreads(it));
    }
  }
  ScoreBatchArgs a;
  a.items = Upload(rt, st, items);
  a.thread_base = Upload(rt, st, base);
  a.n_items = static_cast<int32_t>(items.size());
  a.dim = hd;
  a.q_pool = Upload(rt, st, p.queries);
  a.q_elems = static_cast<int64_t>(p.queries.size());
  a.panel_pool = Upload(rt, st, bounds);
  a.panel_elems = 2 * static_cast<int64_t>(bounds.size());
  a.score_pool = Upload(rt, st, std::vector<float>(plans * total, NAN));
  a.score_elems = plans * total;
  a.total_threads = base.back();
  const OpLaunchers* k = rt.launchers();  // CUDA: the kernels run them
  Op score = ScoreClustersBatchOp(a);
  if (k != nullptr) {
    score.device_launch = [k, a](void* x) {
      return k->ScoreClustersBatch(a, x);
    };
  }
  EXPECT_TRUE(rt.Launch(std::move(score), st).ok());
  SelectArgs sa;
  sa.n = total;
  sa.seg_first = Upload(rt, st, seg_first);
  sa.seg_size = Upload(rt, st, seg_size);
  sa.n_segs = static_cast<int32_t>(p.segs.size());
  sa.budget = c.budget;
  sa.page_size = c.quest_page_size;
  sa.mode = threads::kSelectTopPages;
  sa.max_out = MaxPlannedBlocks(total, sa.n_segs, 0, sa.page_size);
  std::vector<SelectArgs> args;
  std::vector<threads::SelectItem> select;
  for (int j = 0; j < plans; ++j) {
    sa.scores = a.score_pool + int64_t{4} * j * total;
    sa.scratch = ValueOrDie(rt.Malloc(SelectScratchBytes(total, sa.n_segs)));
    sa.out = ValueOrDie(rt.Malloc(sa.max_out * sizeof(PlannedBlock)));
    sa.totals = ValueOrDie(rt.Malloc(sizeof(PlanTotals)));
    args.push_back(sa);
    select.push_back(ItemOf(sa));
  }
  SelectBatchArgs b;
  b.items = Upload(rt, st, select);
  b.n_items = plans;
  b.max_n = total;
  Op op = SelectBlocksBatchOp(b, select);
  if (k != nullptr) {
    op.device_launch = [k, b](void* x) { return k->SelectBlocksBatch(b, x); };
  }
  EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  std::vector<DevicePlan> out(p.n_q);
  for (int j = 0; j < plans; ++j) {
    out[j].totals = Download<PlanTotals>(rt, st, args[j].totals, 1)[0];
    if (out[j].totals.blocks <= 0) continue;  // (no 0-byte pinned buffer)
    out[j].blocks =
        Download<PlannedBlock>(rt, st, args[j].out, out[j].totals.blocks);
  }
  for (int j = plans; j < p.n_q; ++j) out[j] = out[0];
  return out;
}

// Runs `check(problem, config, case)` over the cases: 1 and 4 segments,
// head dims 5, 16 and 67, page sizes 5 and 16, budgets 1, 7, 37 and 1000
// (not multiples of the page size; 1000: every page), both GQA modes.
template <class Check>
void ForEachQuestCase(uint64_t seed, Check check) {
  std::mt19937 rng(seed);
  int cases = 0;
  for (int n_segs : {1, 4}) {
    for (int hd : {5, 16, 67}) {
      for (int page_size : {5, 16}) {
        for (int budget : {1, 7, 37, 1000}) {
          for (GqaSelection gqa :
               {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
            SCOPED_TRACE(testing::Message()
                         << "segs " << n_segs << " dim " << hd << " page "
                         << page_size << " budget " << budget << " "
                         << (gqa == GqaSelection::kPerKvHead ? "per_kv_head"
                                                             : "per_query"));
            const QuestProblem p =
                MakeQuestProblem(rng, n_segs, 4, hd, page_size);
            KvStoreConfig c;
            c.policy = KvPolicy::kQuest;
            c.budget = budget;
            c.quest_page_size = page_size;
            c.recent_tokens = 5;  // quest plans none
            c.gqa_selection = gqa;
            check(p, c, ++cases);
          }
        }
      }
    }
  }
}

// The device body's page score is the CPU's QuestScores bits in every
// kernel set, planted bounds included.
TEST(QuestPlansTest, PageScoresAreTheCpuBits) {
  int compared = 0;
  ForEachQuestCase(11, [&](const QuestProblem& p, const KvStoreConfig&, int) {
    for (const KernelSet* ks : AvailableKernelSets()) {
      ScopedKernels scoped(ks);
      for (const Segment* s : p.segs) {
        const HeadIndex& h = s->layer(0).heads[0];
        const int64_t pages =
            static_cast<int64_t>(h.page_min.size()) / p.head_dim;
        std::vector<float> host(pages);
        for (int j = 0; j < p.n_q; ++j) {
          const float* q = p.queries.data() + size_t{1} * j * p.head_dim;
          cpu::QuestScores(q, h.page_min.data(), h.page_max.data(), pages,
                           p.head_dim, host.data());
          for (int64_t pg = 0; pg < pages; ++pg) {
            const float dev = threads::QuestPageScore(
                q, h.page_min.data() + pg * p.head_dim,
                h.page_max.data() + pg * p.head_dim, p.head_dim);
            uint32_t a, b;
            std::memcpy(&a, &dev, 4);
            std::memcpy(&b, &host[pg], 4);
            EXPECT_TRUE(a == b || (std::isnan(dev) && std::isnan(host[pg])))
                << ks->name << " page " << pg << ": " << dev
                << " != " << host[pg];
            ++compared;
          }
        }
      }
    }
  });
  EXPECT_GT(compared, 1000);
}

// Whether query j's plan (per query head) ends on a score tie: an untaken
// page scores exactly what its last taken page scores (NaN as -inf), so
// the tie order (segment, then page) decides what is taken.
bool EndsOnATie(const QuestProblem& p, int j, const DevicePlan& plan) {
  if (plan.totals.blocks <= 0) return false;
  std::vector<std::vector<float>> scores;
  for (const Segment* s : p.segs) {
    const HeadIndex& h = s->layer(0).heads[0];
    std::vector<float>& x = scores.emplace_back(h.page_min.size() / p.head_dim);
    cpu::QuestScores(p.queries.data() + size_t{1} * j * p.head_dim,
                     h.page_min.data(), h.page_max.data(),
                     static_cast<int64_t>(x.size()), p.head_dim, x.data());
    for (float& v : x) v = std::isnan(v) ? -INFINITY : v;
  }
  const PlannedBlock& last = plan.blocks.back();
  const float cut = scores[last.segment][last.id];
  std::vector<std::vector<bool>> taken(scores.size());
  for (size_t s = 0; s < scores.size(); ++s) taken[s].resize(scores[s].size());
  for (const PlannedBlock& b : plan.blocks) taken[b.segment][b.id] = true;
  for (size_t s = 0; s < scores.size(); ++s) {
    for (size_t i = 0; i < scores[s].size(); ++i) {
      if (!taken[s][i] && scores[s][i] == cut) return true;
    }
  }
  return false;
}

// The batch ops' plans equal the policy's, every kernel set on the host.
TEST(QuestPlansTest, BatchOpsEqualTheQuestPolicy) {
  int ties = 0;
  ForEachQuestCase(
      5, [&](const QuestProblem& p, const KvStoreConfig& c, int cases) {
        FakeRuntime rt(TestConfig(
            cases % 2 ? Schedule::kThreaded : Schedule::kLazy, cases, 32, 20));
        const std::vector<DevicePlan> got = QuestPlanOn(rt, p, c);
        EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
        for (const KernelSet* ks : AvailableKernelSets()) {
          ScopedKernels scoped(ks);
          const std::vector<HeadPlan> want = PolicyPlans(p, c);
          for (int j = 0; j < p.n_q; ++j) ExpectSamePlan(want[j], got[j]);
        }
        for (int j = 0;
             j < p.n_q && c.gqa_selection == GqaSelection::kPerQueryHead; ++j) {
          ties += EndsOnATie(p, j, got[j]);
        }
      });
  EXPECT_GT(ties, 10) << "the planted ties did not reach a plan's end";
}

// The same on a GPU: the CUDA kernels of selection_ops.cu (the same thread
// bodies) give the policy's plans.
TEST(QuestPlansTest, CudaEqualsTheQuestPolicy) {
#ifdef CLUSTERKV_HAVE_CUDA
  auto rt = cuda::CudaRuntime::Create(0);
  if (!rt.ok()) GTEST_SKIP() << rt.status().message();
  ForEachQuestCase(
      5, [&rt](const QuestProblem& p, const KvStoreConfig& c, int) {
        const std::vector<DevicePlan> got = QuestPlanOn(**rt, p, c);
        const std::vector<HeadPlan> want = PolicyPlans(p, c);
        for (int j = 0; j < p.n_q; ++j) ExpectSamePlan(want[j], got[j]);
      });
#else
  GTEST_SKIP() << "this build has no CUDA backend";
#endif
}

// The DevicePlanner itself (PlanLayer, queries from the host): its layout
// of quest requests (group queries uploaded whole, a score item per plan
// and segment, resident page bounds, kSelectTopPages) gives the policy's
// plans in both GQA modes; a clusterkv store's segments in the same
// planner are untouched by it (its own tests), and the page bounds stay
// resident (one upload per segment).
TEST(QuestPlansTest, PlannerEqualsTheQuestPolicy) {
  ForEachQuestCase(
      9, [](const QuestProblem& p, const KvStoreConfig& c, int cases) {
        KvShape shape;
        shape.n_layers = 1;
        shape.n_heads = p.n_q;
        shape.n_kv_heads = 1;
        shape.head_dim = p.head_dim;
        const std::vector<HeadPlan> want = PolicyPlans(p, c);
        FakeRuntime rt(TestConfig(Schedule::kThreaded, cases, 32, 20));
        DevicePlanner planner(rt, nullptr, int64_t{1} << 20);
        ASSERT_TRUE(planner.Plans(c));
        for (int call = 0; call < 2; ++call) {
          std::vector<HeadPlan> got(p.n_q);
          ASSERT_TRUE(planner.PlanLayer(c, shape, p.segs, 0, p.queries.data(),
                                        got.data()));
          for (int j = 0; j < p.n_q; ++j) {
            ExpectSamePlan(want[j], AsDevicePlan(got[j]));
          }
        }
        EXPECT_EQ(planner.table_uploads(), static_cast<int64_t>(p.segs.size()));
        EXPECT_EQ(planner.layers_planned(), 2);
        EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      });
}

// Only clusterkv and quest plan on the device.
TEST(QuestPlansTest, OtherPoliciesPlanOnTheHost) {
  FakeRuntime rt(TestConfig(Schedule::kInline, 1, 8, 0));
  DevicePlanner planner(rt, nullptr, int64_t{1} << 20);
  for (KvPolicy policy : {KvPolicy::kFull, KvPolicy::kClusterKv,
                          KvPolicy::kQuest, KvPolicy::kStreaming}) {
    KvStoreConfig c;
    c.policy = policy;
    EXPECT_EQ(planner.Plans(c),
              policy == KvPolicy::kClusterKv || policy == KvPolicy::kQuest);
  }
}

}  // namespace
}  // namespace ckv::kernels::device
