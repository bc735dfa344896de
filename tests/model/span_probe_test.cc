// ProbeSpan (model/kv/span_probe.h) on small synthetic stores driven
// directly: the cluster ranks it reports must explain the selection the
// store actually made (clusterkv takes whole clusters in rank order until
// B, the last one trimmed to its first rows), and its key scores, weights
// and ranks must match a brute-force recomputation.
#include "model/kv/span_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/dtype.h"
#include "model/kv/clustered_store.h"

namespace ckv {
namespace {

const KvShape kShape{/*n_layers=*/2, /*n_heads=*/4, /*n_kv_heads=*/2,
                     /*head_dim=*/16};
constexpr int kHd = 16;
constexpr int kWidth = 2 * kHd;  // n_kv_heads * head_dim
constexpr int kSinks = 4;
constexpr int kNeedle = 60;  // the needle's keys: positions [60, 64)

KvStoreConfig SmallConfig(int budget, GqaSelection gqa) {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.budget = budget;
  c.sink_tokens = kSinks;
  c.tokens_per_cluster = 10;
  c.window = 32;
  c.dense_layers = 1;
  c.gqa_selection = gqa;
  c.async_clustering = false;
  return c;
}

// Keys near one of 6 axis directions; the needle's keys point along
// channel 7 (which the query favours) with a large norm.
void Row(int64_t pos, int layer, float* k, float* v) {
  std::mt19937_64 rng(pos * 7919 + layer);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int dir = static_cast<int>(rng() % 6);
  const bool needle = pos >= kNeedle && pos < kNeedle + 4;
  for (int i = 0; i < kWidth; ++i) {
    k[i] = 0.3f * n(rng) + ((i % kHd) % 6 == dir ? 3.0f : 0.0f);
    if (needle && i % kHd == 7) k[i] += 8.0f;
    v[i] = n(rng);
  }
}

float RoundTrip(float x) { return kernels::F16ToF32(kernels::F32ToF16(x)); }

void Add(ClusteredKvStore& s, int64_t n, AppendKind kind) {
  ASSERT_TRUE(s.Reserve(n, kind).ok());
  std::vector<float> k(n * kWidth), v(n * kWidth);
  for (int l = 0; l < kShape.n_layers; ++l) {
    for (int64_t t = 0; t < n; ++t) {
      Row(s.num_tokens() + t, l, &k[t * kWidth], &v[t * kWidth]);
    }
    s.Append(l, n, k.data(), v.data());
  }
  s.Commit(n);
}

// One decode step with query q in every layer.
void DecodeStep(ClusteredKvStore& s, const std::vector<float>& q) {
  ASSERT_TRUE(s.Reserve(1, AppendKind::kGenerated).ok());
  const int64_t pos = s.num_tokens();
  std::vector<float> k(kWidth), v(kWidth);
  AttendSet set;
  for (int l = 0; l < kShape.n_layers; ++l) {
    Row(pos, l, k.data(), v.data());
    s.Append(l, 1, k.data(), v.data());
    s.Select(l, LayerQuery{q.data(), &pos, 1}, &set);
  }
  s.Commit(1);
}

std::vector<float> Query(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.3f);
  std::vector<float> q(kShape.n_heads * kHd);
  for (size_t i = 0; i < q.size(); ++i) q[i] = n(rng) + 3.0f * (i % kHd == 7);
  return q;
}

TEST(SpanProbe, RefusesWithoutARecordOrALayer) {
  ClusteredKvStore s(kShape, SmallConfig(20, GqaSelection::kPerQueryHead),
                     nullptr);
  EXPECT_EQ(ProbeSpan(s, 1, 0, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ProbeSpan(s, 2, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProbeSpan(s, 1, 5, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The ranks explain the store's own selection, per query head and per KV
// head, and the scores match a brute-force recomputation.
TEST(SpanProbe, RanksExplainTheSelection) {
  for (GqaSelection gqa :
       {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
    const int budget = 20;
    ClusteredKvStore s(kShape, SmallConfig(budget, gqa), nullptr);
    s.set_record_selection(true);
    Add(s, 150, AppendKind::kPrompt);   // sinks 0-3, a segment 4-149
    Add(s, 5, AppendKind::kGenerated);  // tail
    const auto q = Query(5);
    DecodeStep(s, q);
    const int64_t q_pos = 155;
    // The whole store: sinks, the segment, the tail and the query.
    auto probe = ProbeSpan(s, 1, 0, 1000);
    ASSERT_TRUE(probe.ok()) << probe.status();
    ASSERT_EQ(probe->size(), 4u);
    const Segment& seg = *s.segments()[0];
    for (const SpanHeadProbe& h : *probe) {
      ASSERT_EQ(h.keys.size(), static_cast<size_t>(q_pos + 1));
      EXPECT_EQ(h.clustered, 146);
      const HeadIndex& idx = seg.layer(1).heads[h.head / 2];
      EXPECT_EQ(h.clusters, idx.k);
      // Brute-force scores of this head's query.
      std::vector<double> score(q_pos + 1);
      std::vector<float> k(kWidth), v(kWidth);
      for (int64_t p = 0; p <= q_pos; ++p) {
        Row(p, 1, k.data(), v.data());
        double dot = 0;
        for (int d = 0; d < kHd; ++d) {
          dot +=
              double{q[h.head * kHd + d]} * RoundTrip(k[h.head / 2 * kHd + d]);
        }
        score[p] = dot;
      }
      double z = 0;
      const double m = *std::max_element(score.begin(), score.end());
      for (double x : score) z += std::exp((x - m) / 4.0);
      double mass = 0;
      bool saw_top = false;
      for (const SpanKey& key : h.keys) {
        const int64_t p = key.pos;
        EXPECT_NEAR(key.score, score[p], 1e-9) << p;
        EXPECT_NEAR(key.weight, std::exp((score[p] - m) / 4.0) / z, 1e-12);
        mass += key.weight;
        if (p < kSinks || p >= 150) {  // sinks, tail, the query itself
          EXPECT_EQ(key.segment, -1) << p;
          EXPECT_EQ(key.cluster_rank, -1) << p;
          EXPECT_TRUE(key.selected) << p;
          continue;
        }
        int64_t better = 0;
        for (int64_t o = kSinks; o < 150; ++o) better += score[o] > score[p];
        EXPECT_EQ(key.key_rank, better) << p;
        ASSERT_EQ(key.segment, 0);
        ASSERT_GE(key.cluster, 0);
        const int32_t row = static_cast<int32_t>(p - seg.first_pos());
        const int32_t* first = idx.members.data() + idx.offsets[key.cluster];
        const int32_t* last = idx.members.data() + idx.offsets[key.cluster + 1];
        const int32_t* at = std::find(first, last, row);
        ASSERT_NE(at, last) << "the key is a member of its cluster";
        EXPECT_EQ(key.cluster_size, last - first);
        EXPECT_EQ(key.span_members, key.cluster_size);  // the span holds all
        // clusterkv takes whole clusters in rank order, the last trimmed
        // to its first rows: selected iff within B.
        EXPECT_EQ(key.selected, key.tokens_ahead + (at - first) < budget)
            << "head " << h.head << " pos " << p << " rank "
            << key.cluster_rank;
        if (key.cluster_rank == 0) {
          EXPECT_EQ(key.tokens_ahead, 0);
          EXPECT_EQ(key.cluster_score, h.top_cluster_score);
          saw_top = true;
        } else {
          EXPECT_GT(key.tokens_ahead, 0);
          EXPECT_LE(key.cluster_score, h.top_cluster_score);
        }
      }
      EXPECT_TRUE(saw_top);
      EXPECT_NEAR(mass, 1.0, 1e-9);
      EXPECT_NEAR(h.span_weight, 1.0, 1e-9);
      // The target is the key of largest weight.
      for (const SpanKey& key : h.keys) {
        EXPECT_LE(key.weight, h.keys[h.target].weight);
      }
    }
  }
}

// A span narrower than the store: only its keys, its purity counted inside
// it, and the needle (favoured by the query) is the target.
TEST(SpanProbe, NeedleSpanPurityAndTarget) {
  ClusteredKvStore s(kShape, SmallConfig(20, GqaSelection::kPerQueryHead),
                     nullptr);
  s.set_record_selection(true);
  Add(s, 150, AppendKind::kPrompt);
  const auto q = Query(9);
  DecodeStep(s, q);
  auto probe = ProbeSpan(s, 1, kNeedle, kNeedle + 4);
  ASSERT_TRUE(probe.ok()) << probe.status();
  for (const SpanHeadProbe& h : *probe) {
    ASSERT_EQ(h.keys.size(), 4u);
    ASSERT_GE(h.target, 0);
    EXPECT_GT(h.span_weight, 0.5) << "the query favours the needle";
    int64_t in_span = 0;
    for (const SpanKey& key : h.keys) {
      EXPECT_GE(key.span_members, 1);
      EXPECT_LE(key.span_members, std::min<int64_t>(4, key.cluster_size));
      in_span += key.span_members;
      EXPECT_LT(key.key_rank, 4) << "the needle's keys score highest";
    }
    // Sum over keys of how many span keys share its cluster = sum over
    // clusters of (span members)^2 >= 4.
    EXPECT_GE(in_span, 4);
  }
  // Beyond the query: clamped.
  auto tail = ProbeSpan(s, 1, 140, 10000);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ((*tail)[0].keys.size(), 11u);  // 140 .. 150 (the query)
}

}  // namespace
}  // namespace ckv
