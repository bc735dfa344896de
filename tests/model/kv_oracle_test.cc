// The selection-policy registry (model/kv/policies/registry.h) and the
// `oracle` policy: exact top-B clustered tokens by q.k, the upper bound of
// every other policy's top-k recall.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "kernels/cpu/ops.h"
#include "model/kv/clustered_store.h"
#include "model/kv/policies/registry.h"
#include "model/kv/quality.h"

namespace ckv {
namespace {

const KvShape kShape{/*n_layers=*/2, /*n_heads=*/8, /*n_kv_heads=*/2,
                     /*head_dim=*/16};

KvPolicy Oracle() {
  auto p = ParseKvPolicy("oracle");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : KvPolicy::kFull;
}

// A parent with every index built, so that forks may use any policy.
KvStoreConfig ParentConfig() {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.build_all_indexes = true;
  c.budget = 32;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 10;
  c.window = 32;
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

// Appends n random tokens (keys: Gaussian, with a per-token direction).
void Feed(ClusteredKvStore& s, int64_t n, AppendKind kind, uint64_t seed) {
  ASSERT_TRUE(s.Reserve(n, kind).ok());
  const int width = kShape.n_kv_heads * kShape.head_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(n * width), v(n * width);
  for (int l = 0; l < kShape.n_layers; ++l) {
    for (int64_t i = 0; i < n * width; ++i) {
      k[i] = g(rng) + ((i % 16) == int(rng() % 16) ? 2.0f : 0.0f);
      v[i] = g(rng);
    }
    s.Append(l, n, k.data(), v.data());
  }
  s.Commit(n);
}

std::vector<float> RandomQuery(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(kShape.n_heads * kShape.head_dim);
  for (float& x : q) x = g(rng);
  return q;
}

// A fork of `parent` with policy p, budget b and gqa g; one decode Select
// at layer 1 with query q, measured.
LayerQuality Measure(const ClusteredKvStore& parent, KvPolicy p, int b,
                     GqaSelection g, const std::vector<float>& q,
                     std::unique_ptr<ClusteredKvStore>* fork_out = nullptr) {
  KvStoreConfig c = parent.config();
  c.policy = p;
  c.budget = b;
  c.gqa_selection = g;
  auto fork = parent.Fork(c);
  EXPECT_TRUE(fork.ok()) << fork.status();
  if (!fork.ok()) return {};
  ClusteredKvStore& s = **fork;
  s.set_record_selection(true);
  // As the transformer: append the token's K,V, select, measure, commit.
  const int64_t pos = s.num_tokens();
  EXPECT_TRUE(s.Reserve(1, AppendKind::kGenerated).ok());
  const std::vector<float> row = RandomQuery(1000 + pos);  // any values
  for (int l = 0; l < kShape.n_layers; ++l) {
    s.Append(l, 1, row.data(),
             row.data() + kShape.n_kv_heads * kShape.head_dim);
  }
  AttendSet set;
  s.Select(1, LayerQuery{q.data(), &pos, 1}, &set);
  auto got = MeasureLastDecode(s, 1);
  EXPECT_TRUE(got.ok()) << got.status();
  s.Commit(1);
  if (fork_out != nullptr) *fork_out = *std::move(fork);
  return got.ok() ? *got : LayerQuality{};
}

TEST(PolicyRegistry, IdsAndNamesAreUniqueAndRoundTrip) {
  std::set<int32_t> ids;
  std::set<std::string> names;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    EXPECT_TRUE(ids.insert(static_cast<int32_t>(p.id)).second) << p.name;
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    auto parsed = ParseKvPolicy(p.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p.id);
    EXPECT_EQ(KvPolicyName(p.id), p.name);
    KvStoreConfig c;
    c.policy = p.id;
    EXPECT_TRUE(ValidateKvStoreConfig(c).ok()) << p.name;
    auto made = MakePolicy(c);
    ASSERT_NE(made, nullptr) << p.name;
    EXPECT_EQ(made->name(), p.name);
  }
  EXPECT_GE(RegisteredPolicies().size(), 5u);
}

// Snapshot files and store fingerprints hold these ids: they never change.
TEST(PolicyRegistry, StoredIdsAreStable) {
  const std::pair<const char*, int32_t> stable[] = {
      {"full", 0},      {"clusterkv", 1}, {"quest", 2},
      {"streaming", 3}, {"oracle", 4},    {"clusterkv_rerank", 5}};
  for (const auto& [name, id] : stable) {
    auto p = ParseKvPolicy(name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(static_cast<int32_t>(*p), id) << name;
  }
}

TEST(PolicyRegistry, UnknownPoliciesAreRefused) {
  auto p = ParseKvPolicy("best");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("oracle"), std::string::npos)
      << p.status();
  KvStoreConfig c;
  c.policy = static_cast<KvPolicy>(77);
  EXPECT_FALSE(IsRegisteredPolicy(c.policy));
  EXPECT_EQ(ValidateKvStoreConfig(c).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(KvPolicyName(c.policy), "?");
  EXPECT_EQ(MakePolicy(c), nullptr);
}

// Help texts of the programs list the policies from here: the served ones
// (not evaluation-only), or all, by ascending id.
TEST(PolicyRegistry, JoinedNamesListServedAndEvaluationPolicies) {
  std::vector<std::string> served, all;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    all.push_back(p.name);
    if (!p.evaluation_only) served.push_back(p.name);
  }
  ASSERT_LT(served.size(), all.size());  // oracle is evaluation-only
  EXPECT_EQ(std::vector<std::string>(
                absl::StrSplit(JoinPolicyNames("|", false), '|')),
            served);
  EXPECT_EQ(std::vector<std::string>(
                absl::StrSplit(JoinPolicyNames(", ", true), ", ")),
            all);
  EXPECT_EQ(all.front(), "full");
}

TEST(PolicyRegistry, ForksNeedTheIndexesOfTheirPolicy) {
  KvStoreConfig c = ParentConfig();
  c.build_all_indexes = false;
  c.policy = KvPolicy::kStreaming;  // builds no index
  ClusteredKvStore parent(kShape, c, nullptr);
  Feed(parent, 100, AppendKind::kPrompt, 1);
  for (const PolicyInfo& p : RegisteredPolicies()) {
    KvStoreConfig child = c;
    child.policy = p.id;
    auto fork = parent.Fork(child);
    EXPECT_EQ(fork.ok(), p.indexes == 0) << p.name;
    if (!fork.ok()) {
      EXPECT_EQ(fork.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(fork.status().message().find(p.name), std::string::npos);
    }
  }
}

// Per query head the oracle's selection is the truth of top-k recall, so its
// recall is 1 and no policy's is higher, at every budget.
TEST(OraclePolicy, RecallIsExactAndAtLeastEveryOtherPolicys) {
  ClusteredKvStore parent(kShape, ParentConfig(), nullptr);
  Feed(parent, 150, AppendKind::kPrompt, 1);
  for (int i = 0; i < 70; ++i) Feed(parent, 1, AppendKind::kGenerated, 9 + i);
  ASSERT_GE(parent.segments().size(), 3u);
  const int64_t clustered = parent.clustered_tokens();
  for (int budget : {1, 7, 16, 40, 100, 200}) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      const auto q = RandomQuery(seed);
      const LayerQuality oracle =
          Measure(parent, Oracle(), budget, GqaSelection::kPerQueryHead, q);
      EXPECT_EQ(oracle.k, std::min<int64_t>(budget, clustered));
      EXPECT_DOUBLE_EQ(oracle.topk_recall, 1.0) << "budget " << budget;
      for (const PolicyInfo& p : RegisteredPolicies()) {
        if (!p.selects || p.id == Oracle()) continue;
        for (GqaSelection g :
             {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
          const LayerQuality other = Measure(parent, p.id, budget, g, q);
          EXPECT_GE(oracle.topk_recall, other.topk_recall)
              << p.name << " budget " << budget;
        }
      }
    }
  }
}

// Summed score of the group's queries for each clustered position of
// (layer, kv_head), in double as quality.cc scores.
std::vector<double> GroupScores(const ClusteredKvStore& s, int layer, int g,
                                const std::vector<float>& q) {
  const int hd = kShape.head_dim, group = kShape.group();
  std::vector<double> scores;
  std::vector<float> k(hd);
  for (const auto& seg : s.segments()) {
    for (int32_t r = 0; r < seg->size(); ++r) {  // in position order
      const int64_t row = seg->StoredRow(layer, g, r);
      kernels::ref::DequantizeRow(
          s.config().kv_dtype, seg->keys(layer, g) + row * hd, hd, k.data());
      double sum = 0;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        double acc = 0;
        for (int d = 0; d < hd; ++d) acc += double{q[h * hd + d]} * k[d];
        sum += acc;
      }
      scores.push_back(sum);
    }
  }
  return scores;
}

// per_kv_head: one selection per group, the top-B by the summed score.
TEST(OraclePolicy, PerKvHeadSelectsTheTopOfTheGroupsSummedScores) {
  ClusteredKvStore parent(kShape, ParentConfig(), nullptr);
  Feed(parent, 120, AppendKind::kPrompt, 3);
  for (int i = 0; i < 40; ++i) Feed(parent, 1, AppendKind::kGenerated, 50 + i);
  const auto q = RandomQuery(11);
  for (int budget : {5, 33, 64}) {
    std::unique_ptr<ClusteredKvStore> fork;
    Measure(parent, Oracle(), budget, GqaSelection::kPerKvHead, q, &fork);
    ASSERT_NE(fork, nullptr);
    const int64_t first = fork->config().sink_tokens;
    for (int g = 0; g < kShape.n_kv_heads; ++g) {
      std::vector<int64_t> want =
          TopKIndices(GroupScores(parent, 1, g, q), budget);
      for (int64_t& p : want) p += first;
      for (int h = g * kShape.group(); h < (g + 1) * kShape.group(); ++h) {
        std::vector<int64_t> got = fork->selected_positions(1, h);
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, want) << "budget " << budget << " head " << h;
      }
    }
  }
}

// A budget that covers every clustered token attends densely, in both cache
// modes, from a parent that built no index at all.
TEST(OraclePolicy, BudgetCoveringEverythingIsDense) {
  for (CacheMode mode : {CacheMode::kZeroCopy, CacheMode::kCopy}) {
    KvStoreConfig c = ParentConfig();
    c.policy = Oracle();
    c.build_all_indexes = false;
    c.cache_mode = mode;
    ClusteredKvStore parent(kShape, c, nullptr);
    Feed(parent, 90, AppendKind::kPrompt, 5);
    for (int i = 0; i < 40; ++i) Feed(parent, 1, AppendKind::kGenerated, i);
    for (const auto& seg : parent.segments()) {
      EXPECT_TRUE(seg->layer(1).heads.empty()) << "oracle needs no index";
    }
    const LayerQuality got = Measure(
        parent, Oracle(), 4096, GqaSelection::kPerQueryHead, RandomQuery(2));
    EXPECT_EQ(got.k, parent.clustered_tokens());
    EXPECT_DOUBLE_EQ(got.topk_recall, 1.0);
    EXPECT_NEAR(got.mass_recall, 1.0, 1e-12);
    EXPECT_NEAR(got.output_rel_err, 0.0, 1e-12);
    EXPECT_EQ(got.attended, kShape.n_heads * (parent.num_tokens() + 1));
  }
}

}  // namespace
}  // namespace ckv
