// The clusterkv_rerank policy (model/kv/policies/cluster_rerank.h): a key
// that holds a query's attention but shares its k-means cluster with many
// keys the query scores low -- the needle clusterkv's mean-key score
// dilutes -- is still selected, also when the budget cuts its cluster,
// and with recent rows. Also the SelectionPolicy contract every policy
// keeps (PlanEach = Plan per query), checked here on the same store.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/kv/clustered_store.h"
#include "model/kv/policies/policy.h"
#include "model/kv/policies/registry.h"

namespace ckv {
namespace {

constexpr int kHeadDim = 16;
const KvShape kShape{/*n_layers=*/2, /*n_heads=*/4, /*n_kv_heads=*/2,
                     /*head_dim=*/kHeadDim};
constexpr int kSinks = 4;
constexpr int64_t kNeedlePos = 101;  // late in its cluster's rows

KvPolicy Rerank() {
  auto p = ParseKvPolicy("clusterkv_rerank");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : KvPolicy::kFull;
}

// Keys of one token (every KV head alike), for the query 8 e0:
//  - filler "a" (every a_every-th position): e0 + 2 e1 + noise, q.k ~ 8;
//  - filler "b" (the others): -e0 + 6 e2 + noise, q.k ~ -8;
//  - the needle: 3 e0 + 12 e2, q.k = 24 -- by direction (cos 0.92 with
//    "b", 0.11 with "a") a member of a "b" cluster, whose mean then scores
//    about 8 (3 - 9) / 10 < 8: every "a" cluster ranks first.
std::vector<float> KeyOf(int64_t pos, int a_every, std::mt19937_64& rng) {
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<float> k(kHeadDim);
  for (float& x : k) x = noise(rng);
  if (pos == kNeedlePos) {
    std::fill(k.begin(), k.end(), 0.0f);
    k[0] = 3.0f;
    k[2] = 12.0f;
  } else if (pos % a_every == 0) {
    k[0] += 1.0f;
    k[1] += 2.0f;
  } else {
    k[0] -= 1.0f;
    k[2] += 6.0f;
  }
  return k;
}

KvStoreConfig Config(KvPolicy p, int budget, GqaSelection gqa) {
  KvStoreConfig c;
  c.policy = p;
  c.gqa_selection = gqa;
  c.budget = budget;
  c.sink_tokens = kSinks;
  c.tokens_per_cluster = 10;
  c.window = 32;
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

// Prefills 124 tokens, decodes one with the query e0 on every head and
// returns, per query head, whether layer 1 attended the needle.
std::vector<bool> NeedleSelected(KvPolicy p, int budget, int a_every,
                                 GqaSelection gqa = GqaSelection::kPerQueryHead,
                                 int recent = 0) {
  KvStoreConfig c = Config(p, budget, gqa);
  c.recent_tokens = recent;
  ClusteredKvStore s(kShape, c, nullptr);
  s.set_record_selection(true);
  const int64_t n = 124;
  const int width = kShape.n_kv_heads * kHeadDim;
  std::mt19937_64 rng(5);
  std::vector<float> k(n * width), v(n * width, 0.5f);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> key = KeyOf(i, a_every, rng);
    for (int h = 0; h < kShape.n_kv_heads; ++h) {
      std::copy(key.begin(), key.end(), k.begin() + i * width + h * kHeadDim);
    }
  }
  EXPECT_TRUE(s.Reserve(n, AppendKind::kPrompt).ok());
  for (int l = 0; l < kShape.n_layers; ++l) {
    s.Append(l, n, k.data(), v.data());
  }
  s.Commit(n);
  EXPECT_GT(s.clustered_tokens(), kNeedlePos);
  const int64_t pos = s.num_tokens();
  EXPECT_TRUE(s.Reserve(1, AppendKind::kGenerated).ok());
  for (int l = 0; l < kShape.n_layers; ++l) {
    s.Append(l, 1, k.data() + width, v.data());  // any row
  }
  std::vector<float> q(kShape.n_heads * kHeadDim, 0.0f);
  for (int h = 0; h < kShape.n_heads; ++h) q[h * kHeadDim] = 8.0f;
  AttendSet set;
  s.Select(1, LayerQuery{q.data(), &pos, 1}, &set);
  s.Commit(1);
  std::vector<bool> found;
  for (int h = 0; h < kShape.n_heads; ++h) {
    const std::vector<int64_t>& got = s.selected_positions(1, h);
    EXPECT_EQ(static_cast<int64_t>(got.size()), budget) << h;
    std::vector<int64_t> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "a position selected twice, head " << h;
    const int64_t clustered_end = kSinks + s.clustered_tokens();
    for (int64_t r = clustered_end - recent; r < clustered_end; ++r) {
      EXPECT_TRUE(std::binary_search(sorted.begin(), sorted.end(), r))
          << "recent position " << r << " not selected, head " << h;
    }
    found.push_back(std::find(got.begin(), got.end(), kNeedlePos) != got.end());
  }
  return found;
}

TEST(ClusterKvRerank, FindsTheNeedleClusterKvDilutes) {
  // {budget, a_every}: 40 "a" tokens, then 20 (the needle's cluster cut to
  // its densest 6 rows).
  for (const auto& [budget, a_every] :
       {std::pair{30, 3}, std::pair{16, 3}, std::pair{6, 6}}) {
    // The fixture reproduces the failure: where k-means puts the needle
    // among "b" keys (KV head 0; head 1's seed isolates it), clusterkv's
    // budget goes to the clusters of "a", whose mean key outscores the
    // needle's cluster.
    const std::vector<bool> plain =
        NeedleSelected(KvPolicy::kClusterKv, budget, a_every);
    EXPECT_GE(std::count(plain.begin(), plain.end(), false), 1)
        << "clusterkv found it on every head: no dilution, budget " << budget;
    // Its cluster is among the 4 x B candidates (the "a" tokens rank
    // ahead); its mass per row (the needle's weight 1 over its cluster's
    // ~20 rows, against exp(-16/4) = 0.018 per "a" row) ranks it first, and at
    // B = 16 and 6, where the budget cuts that cluster, its densest rows hold
    // the needle (its first rows in position order, as clusterkv trims, do not:
    // the needle comes late). per_kv_head: the summed query's clusters, every
    // query's mass.
    for (GqaSelection g :
         {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
      for (bool found : NeedleSelected(Rerank(), budget, a_every, g)) {
        EXPECT_TRUE(found) << "budget " << budget << " " << GqaSelectionName(g);
      }
    }
  }
}

// recent_tokens: the most recent clustered rows come first, the rerank
// fills the rest from the candidates' rows before them (a cluster's rows
// inside the recent range are not candidates twice: at B = 40 the "a"
// cluster holding recent rows is selected too). B - recent >= 12 keeps
// 4 x (B - recent) candidates beyond the 40 "a" tokens.
TEST(ClusterKvRerank, RecentRowsAndTheNeedleShareTheBudget) {
  for (int budget : {16, 40}) {
    for (int recent : {2, 4}) {
      for (GqaSelection g :
           {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
        for (bool found : NeedleSelected(Rerank(), budget, 3, g, recent)) {
          EXPECT_TRUE(found) << "budget " << budget << " recent " << recent
                             << " " << GqaSelectionName(g);
        }
      }
    }
  }
}

bool SamePlan(const HeadPlan& a, const HeadPlan& b) {
  if (a.tokens != b.tokens || a.blocks.size() != b.blocks.size()) return false;
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    const BlockRef &x = a.blocks[i], &y = b.blocks[i];
    if (x.segment != y.segment || x.kind != y.kind || x.id != y.id ||
        x.begin != y.begin || x.count != y.count) {
      return false;
    }
  }
  return true;
}

// The interface contract (policy.h): PlanEach's plan of query i is exactly
// Plan's of that query alone, for every selecting policy, over random
// keys in several segments (both KV heads, odd budgets, recent rows).
TEST(SelectionPolicyContract, PlanEachEqualsPlanPerQuery) {
  KvStoreConfig base =
      Config(KvPolicy::kClusterKv, 16, GqaSelection::kPerQueryHead);
  base.build_all_indexes = true;
  ClusteredKvStore s(kShape, base, nullptr);
  const int64_t n = 300;
  const int width = kShape.n_kv_heads * kHeadDim;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(n * width), v(n * width);
  for (float& x : k) x = g(rng);
  for (float& x : v) x = g(rng);
  ASSERT_TRUE(s.Reserve(n, AppendKind::kPrompt).ok());
  for (int l = 0; l < kShape.n_layers; ++l) {
    s.Append(l, n, k.data(), v.data());
  }
  s.Commit(n);
  std::vector<const Segment*> segs;
  for (const auto& seg : s.segments()) segs.push_back(seg.get());
  ASSERT_GE(segs.size(), 1u);
  const int group = kShape.group();
  std::vector<std::vector<float>> q(group, std::vector<float>(kHeadDim));
  std::vector<const float*> qs;
  for (auto& row : q) {
    for (float& x : row) x = g(rng);
    qs.push_back(row.data());
  }
  int checked = 0;
  for (const PolicyInfo& info : RegisteredPolicies()) {
    if (!info.selects) continue;
    for (int budget : {1, 37, 150}) {
      for (int recent : {0, 9}) {
        KvStoreConfig c = base;
        c.policy = info.id;
        c.budget = budget;
        c.recent_tokens = std::min(recent, budget);
        for (int kv_head = 0; kv_head < kShape.n_kv_heads; ++kv_head) {
          const PlanContext ctx{&segs, 1, kv_head, kHeadDim};
          std::vector<HeadPlan> each(group);
          MakePolicy(c)->PlanEach(ctx, qs.data(), group, each.data());
          for (int i = 0; i < group; ++i) {
            HeadPlan alone;
            MakePolicy(c)->Plan(ctx, &qs[i], 1, &alone);
            EXPECT_TRUE(SamePlan(each[i], alone))
                << info.name << " budget " << budget << " recent " << recent
                << " kv head " << kv_head << " query " << i;
            // quest rounds the budget up to whole pages.
            const int64_t want =
                std::min<int64_t>(budget, s.clustered_tokens());
            if (info.indexes & kPageIndex) {
              EXPECT_GE(alone.tokens, want) << info.name;
            } else {
              EXPECT_EQ(alone.tokens, want) << info.name;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 5 * 3 * 2 * 2 * 2);  // at least 5 selecting policies
}

}  // namespace
}  // namespace ckv
