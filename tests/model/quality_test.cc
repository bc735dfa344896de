// Quality measures (model/kv/quality.h): the math on hand-computed tiny
// cases, and MeasureLastDecode against a brute-force recomputation on small
// synthetic stores driven directly (Reserve/Append/Select/Commit).
#include "model/kv/quality.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "model/kv/clustered_store.h"
#include "model/kv/policies/registry.h"

namespace ckv {
namespace {

// ------------------------------------------------------------------ math

TEST(QualityMath, TopKIndicesBreaksTiesTowardLowerIndex) {
  EXPECT_EQ(TopKIndices({1, 3, 2, 3}, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(TopKIndices({5, 5, 5}, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(TopKIndices({0.5, -1}, 9), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(TopKIndices({1, 2}, 0).empty());
}

TEST(QualityMath, RecallOfCountsHitsOverTruth) {
  EXPECT_DOUBLE_EQ(RecallOf({1, 2, 3, 4}, {2, 4, 9}), 0.5);
  EXPECT_DOUBLE_EQ(RecallOf({7}, {}), 0.0);
  EXPECT_DOUBLE_EQ(RecallOf({}, {1}), 1.0);
  EXPECT_DOUBLE_EQ(RecallOf({3, 3, 5}, {3, 3}), 0.5);  // duplicates once
}

TEST(QualityMath, SoftmaxAndMaskedMass) {
  // exp(0) : exp(ln 3) = 1 : 3.
  auto p = Softmax({0.0, std::log(3.0)}, 1.0);
  EXPECT_NEAR(p[0], 0.25, 1e-15);
  EXPECT_NEAR(p[1], 0.75, 1e-15);
  // scale 0.5 on (0, 2 ln 3) is the same distribution.
  p = Softmax({0.0, 2 * std::log(3.0)}, 0.5);
  EXPECT_NEAR(p[1], 0.75, 1e-15);
  EXPECT_NEAR(MaskedMass({0.25, 0.75}, {1, 0}), 0.25, 1e-15);
  EXPECT_NEAR(MaskedMass({0.1, 0.2, 0.7}, {1, 1, 1}), 1.0, 1e-15);
}

TEST(QualityMath, AttentionOutputOverMaskedRows) {
  const std::vector<double> s = {0.0, std::log(3.0)};
  const std::vector<float> v = {1, 0, 0, 1};  // rows (1,0) and (0,1)
  auto o = AttentionOutput(s, nullptr, v, 2, 1.0);
  EXPECT_NEAR(o[0], 0.25, 1e-15);
  EXPECT_NEAR(o[1], 0.75, 1e-15);
  const std::vector<char> first = {1, 0};
  o = AttentionOutput(s, &first, v, 2, 1.0);
  EXPECT_NEAR(o[0], 1.0, 1e-15);
  EXPECT_NEAR(o[1], 0.0, 1e-15);
  const std::vector<char> none = {0, 0};
  EXPECT_EQ(AttentionOutput(s, &none, v, 2, 1.0), (std::vector<double>{0, 0}));
}

TEST(QualityMath, RelativeError) {
  EXPECT_NEAR(RelativeError({3, 0}, {3, 4}), 0.8, 1e-15);
  EXPECT_EQ(RelativeError({1, 2}, {1, 2}), 0.0);
  EXPECT_EQ(RelativeError({0}, {0}), 0.0);
  EXPECT_TRUE(std::isinf(RelativeError({1}, {0})));
}

TEST(QualityMath, LogitKlAndArgmax) {
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln 4/3.
  const float p[2] = {0.0f, 0.0f};
  const float q[2] = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(LogitKl(p, q, 2), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(LogitKl(q, q, 2), 0.0, 1e-15);
  // Shifting all logits changes nothing.
  const float q_shift[2] = {10.0f, 10.0f + std::log(3.0f)};
  EXPECT_NEAR(LogitKl(q, q_shift, 2), 0.0, 1e-6);
  const float a[3] = {1, 5, 2}, b[3] = {0, 3, 1}, c[3] = {9, 3, 1};
  EXPECT_TRUE(SameArgmax(a, b, 3));
  EXPECT_FALSE(SameArgmax(a, c, 3));
}

// ------------------------------------------------------- store measures

const KvShape kShape{/*n_layers=*/2, /*n_heads=*/4, /*n_kv_heads=*/2,
                     /*head_dim=*/16};
constexpr int kWidth = 2 * 16;  // n_kv_heads * head_dim

KvStoreConfig SmallConfig(KvPolicy policy, int budget) {
  KvStoreConfig c;
  c.policy = policy;
  c.budget = budget;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 10;
  c.window = 32;
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

// K,V rows of one position of one layer: [n_kv_heads][head_dim] each.
using RowFn = std::function<void(int64_t pos, int layer, float* k, float* v)>;

// Keys near one of 6 axis directions (clustered structure), random values.
void ClusteredRow(int64_t pos, int layer, float* k, float* v) {
  std::mt19937_64 rng(pos * 7919 + layer);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int dir = static_cast<int>(rng() % 6);
  for (int i = 0; i < kWidth; ++i) {
    k[i] = 0.3f * n(rng) + ((i % 16) % 6 == dir ? 3.0f : 0.0f);
    v[i] = n(rng);
  }
}

// Appends n tokens of `kind`; with `decode` the last step stops before
// Commit (the caller selects, then commits).
void Add(ClusteredKvStore& s, const RowFn& row, int64_t n, AppendKind kind) {
  ASSERT_TRUE(s.Reserve(n, kind).ok());
  std::vector<float> k(n * kWidth), v(n * kWidth);
  for (int l = 0; l < kShape.n_layers; ++l) {
    for (int64_t t = 0; t < n; ++t) {
      row(s.num_tokens() + t, l, &k[t * kWidth], &v[t * kWidth]);
    }
    s.Append(l, n, k.data(), v.data());
  }
  s.Commit(n);
}

// One decode step as the transformer does it: append the token's K,V in
// every layer, Select at layer 1 with query q at its position, then Commit.
// Returns the measure taken before Commit in *before.
LayerQuality DecodeStep(ClusteredKvStore& s, const RowFn& row,
                        const std::vector<float>& q, LayerQuality* before) {
  EXPECT_TRUE(s.Reserve(1, AppendKind::kGenerated).ok());
  const int64_t pos = s.num_tokens();
  std::vector<float> k(kWidth), v(kWidth);
  AttendSet set;
  for (int l = 0; l < kShape.n_layers; ++l) {
    row(pos, l, k.data(), v.data());
    s.Append(l, 1, k.data(), v.data());
    s.Select(l, LayerQuery{q.data(), &pos, 1}, &set);
  }
  auto pre = MeasureLastDecode(s, 1);
  EXPECT_TRUE(pre.ok()) << pre.status();
  s.Commit(1);
  auto post = MeasureLastDecode(s, 1);
  EXPECT_TRUE(post.ok()) << post.status();
  if (before != nullptr && pre.ok()) *before = *pre;
  return post.ok() ? *post : LayerQuality{};
}

std::vector<float> RandomQuery(uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> q(kShape.n_heads * kShape.head_dim);
  for (float& x : q) x = n(rng);
  return q;
}

float RoundTrip(float x) { return kernels::F16ToF32(kernels::F32ToF16(x)); }

// Brute force of one head from the definitions, with every token of
// positions [0, q_pos] regenerated by `row` and rounded through F16.
struct Brute {
  double topk = 0, mass = 0;
  std::vector<double> o_sparse, o_dense;
};

Brute BruteHead(const RowFn& row, int64_t q_pos, int64_t clustered_end,
                int sinks, int64_t budget, const std::vector<int64_t>& sel,
                const float* q, int kv_head) {
  const int hd = 16;
  std::vector<double> s(q_pos + 1);
  std::vector<std::vector<double>> vals(q_pos + 1);
  std::vector<float> k(kWidth), v(kWidth);
  for (int64_t p = 0; p <= q_pos; ++p) {
    row(p, 1, k.data(), v.data());
    double dot = 0;
    for (int d = 0; d < hd; ++d) {
      dot += double{q[d]} * RoundTrip(k[kv_head * hd + d]);
      vals[p].push_back(RoundTrip(v[kv_head * hd + d]));
    }
    s[p] = dot;
  }
  std::vector<int64_t> order;
  for (int64_t p = sinks; p < clustered_end; ++p) order.push_back(p);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  const int64_t kk = std::min<int64_t>(budget, order.size());
  int64_t hits = 0;
  for (int64_t i = 0; i < kk; ++i) {
    hits += std::count(sel.begin(), sel.end(), order[i]) > 0;
  }
  Brute b;
  b.topk = kk == 0 ? 1.0 : static_cast<double>(hits) / kk;
  const double scale = 1.0 / 4.0;  // 1/sqrt(16)
  double z_all = 0, z_att = 0;
  b.o_sparse.assign(hd, 0);
  b.o_dense.assign(hd, 0);
  for (int64_t p = 0; p <= q_pos; ++p) {
    const double w = std::exp(scale * s[p]);
    const bool att = p < sinks || p >= clustered_end ||
                     std::count(sel.begin(), sel.end(), p) > 0;
    z_all += w;
    if (att) z_att += w;
    for (int d = 0; d < hd; ++d) {
      b.o_dense[d] += w * vals[p][d];
      if (att) b.o_sparse[d] += w * vals[p][d];
    }
  }
  b.mass = z_att / z_all;
  for (int d = 0; d < hd; ++d) {
    b.o_dense[d] /= z_all;
    b.o_sparse[d] /= z_att;
  }
  return b;
}

TEST(Quality, NothingRecordedIsAPreconditionError) {
  ClusteredKvStore s(kShape, SmallConfig(KvPolicy::kClusterKv, 20), nullptr);
  EXPECT_EQ(MeasureLastDecode(s, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Quality, MatchesBruteForceAcrossPoliciesAndWindowClose) {
  for (KvPolicy policy :
       {KvPolicy::kClusterKv, KvPolicy::kQuest, KvPolicy::kStreaming}) {
    ClusteredKvStore s(kShape, SmallConfig(policy, 20), nullptr);
    s.set_record_selection(true);
    Add(s, ClusteredRow, 150, AppendKind::kPrompt);
    Add(s, ClusteredRow, 31, AppendKind::kGenerated);  // tail: 31 of 32
    const auto q = RandomQuery(3, 1.5f);
    const int64_t clustered_end = 4 + s.clustered_tokens();  // before close
    LayerQuality pre;
    const LayerQuality got = DecodeStep(s, ClusteredRow, q, &pre);
    ASSERT_EQ(s.tail_tokens(), 0) << "the step closes a window segment";
    std::vector<double> o_s, o_d;
    double topk = 0, mass = 0;
    for (int h = 0; h < kShape.n_heads; ++h) {
      const Brute b = BruteHead(ClusteredRow, 181, clustered_end, 4, 20,
                                s.selected_positions(1, h), &q[h * 16], h / 2);
      EXPECT_NEAR(got.head_topk_recall[h], b.topk, 1e-12) << h;
      EXPECT_NEAR(got.head_mass_recall[h], b.mass, 1e-9) << h;
      topk += b.topk / 4;
      mass += b.mass / 4;
      o_s.insert(o_s.end(), b.o_sparse.begin(), b.o_sparse.end());
      o_d.insert(o_d.end(), b.o_dense.begin(), b.o_dense.end());
    }
    EXPECT_EQ(got.k, 20);
    EXPECT_NEAR(got.topk_recall, topk, 1e-12);
    EXPECT_NEAR(got.mass_recall, mass, 1e-9);
    EXPECT_NEAR(got.output_rel_err, RelativeError(o_s, o_d), 1e-9);
    EXPECT_GT(got.output_rel_err, 0.0) << KvPolicyName(policy);
    EXPECT_LT(got.mass_recall, 1.0) << KvPolicyName(policy);
    // The Commit (which closed a segment) did not change the measure.
    EXPECT_EQ(pre.head_topk_recall, got.head_topk_recall);
    EXPECT_NEAR(pre.output_rel_err, got.output_rel_err, 1e-15);
  }
}

TEST(Quality, BudgetCoveringEverythingIsExact) {
  for (const PolicyInfo& info : RegisteredPolicies()) {
    const KvPolicy policy = info.id;
    ClusteredKvStore s(kShape, SmallConfig(policy, 4096), nullptr);
    s.set_record_selection(true);
    Add(s, ClusteredRow, 120, AppendKind::kPrompt);
    Add(s, ClusteredRow, 40, AppendKind::kGenerated);
    const LayerQuality got =
        DecodeStep(s, ClusteredRow, RandomQuery(4, 2.0f), nullptr);
    EXPECT_EQ(got.k, 116 + 32) << KvPolicyName(policy);
    EXPECT_DOUBLE_EQ(got.topk_recall, 1.0) << KvPolicyName(policy);
    EXPECT_NEAR(got.mass_recall, 1.0, 1e-12) << KvPolicyName(policy);
    EXPECT_NEAR(got.output_rel_err, 0.0, 1e-12) << KvPolicyName(policy);
    EXPECT_EQ(got.attended, 4 * 161) << KvPolicyName(policy);
  }
}

TEST(Quality, NoClusteredTokensYetCountsAsFullRecall) {
  ClusteredKvStore s(kShape, SmallConfig(KvPolicy::kClusterKv, 8), nullptr);
  s.set_record_selection(true);
  Add(s, ClusteredRow, 3, AppendKind::kPrompt);  // sinks only
  const LayerQuality got =
      DecodeStep(s, ClusteredRow, RandomQuery(5, 1.0f), nullptr);
  EXPECT_EQ(got.k, 0);
  EXPECT_DOUBLE_EQ(got.topk_recall, 1.0);
  EXPECT_NEAR(got.mass_recall, 1.0, 1e-12);
}

// Keys: an old "needle" run (positions 20..39) along axis 0, everything else
// along axes 1..5; the query points along axis 0.
void NeedleRow(int64_t pos, int layer, float* k, float* v) {
  std::mt19937_64 rng(pos * 104729 + layer);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int dir = pos >= 20 && pos < 40 ? 0 : 1 + static_cast<int>(rng() % 5);
  for (int i = 0; i < kWidth; ++i) {
    k[i] = 0.2f * n(rng) + (i % 16 == dir ? 3.0f : 0.0f);
    v[i] = n(rng);
  }
}

TEST(Quality, ClusterKvRecallsAnOldClusterStreamingMisses) {
  std::vector<float> q(kShape.n_heads * kShape.head_dim, 0.0f);
  for (int h = 0; h < kShape.n_heads; ++h) q[h * 16] = 2.0f;
  double recall[2], mass[2];
  int i = 0;
  for (KvPolicy policy : {KvPolicy::kClusterKv, KvPolicy::kStreaming}) {
    ClusteredKvStore s(kShape, SmallConfig(policy, 20), nullptr);
    s.set_record_selection(true);
    Add(s, NeedleRow, 200, AppendKind::kPrompt);
    Add(s, NeedleRow, 10, AppendKind::kGenerated);
    const LayerQuality got = DecodeStep(s, NeedleRow, q, nullptr);
    recall[i] = got.topk_recall;
    mass[i++] = got.mass_recall;
  }
  EXPECT_GT(recall[0], 0.7);
  EXPECT_LT(recall[1], 0.1);
  EXPECT_GT(recall[0], recall[1]);
  EXPECT_GT(mass[0], mass[1]);
}

}  // namespace
}  // namespace ckv
