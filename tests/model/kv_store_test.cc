// The clustered KV store against brute-force references: segment/tail/window
// boundaries, selection order and trimming (both GQA modes), Quest and
// streaming selections, cache accounting, async == inline, forks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "model/kv/clustered_store.h"
#include "model/kv/selection.h"

namespace ckv {
namespace {

using kernels::DType;

const KvShape kShape{/*n_layers=*/2, /*n_heads=*/4, /*n_kv_heads=*/2,
                     /*head_dim=*/16};

KvStoreConfig SmallConfig(KvPolicy policy) {
  KvStoreConfig c;
  c.policy = policy;
  c.budget = 40;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 10;
  c.window = 32;
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

// Feeds tokens with random K,V (deterministic per position) into `store`.
class Feeder {
 public:
  explicit Feeder(uint64_t seed) : seed_(seed) {}
  void Add(ClusteredKvStore& store, int64_t n, AppendKind kind) {
    ASSERT_TRUE(store.Reserve(n, kind).ok());
    const int width = kShape.n_kv_heads * kShape.head_dim;
    std::vector<float> k(n * width), v(n * width);
    for (int l = 0; l < kShape.n_layers; ++l) {
      for (int64_t t = 0; t < n; ++t)
        Row(store.num_tokens() + t, l, &k[t * width], &v[t * width]);
      store.Append(l, n, k.data(), v.data());
    }
    store.Commit(n);
  }
  // Keys cluster around 6 directions so k-means has structure to find.
  void Row(int64_t pos, int layer, float* k, float* v) const {
    std::mt19937_64 rng(seed_ * 1000003 + pos * 31 + layer);
    std::normal_distribution<float> n(0.0f, 1.0f);
    const int width = kShape.n_kv_heads * kShape.head_dim;
    const int dir = static_cast<int>(rng() % 6);
    for (int i = 0; i < width; ++i) {
      k[i] = 0.3f * n(rng) + ((i % kShape.head_dim) % 6 == dir ? 3.0f : 0.0f);
      v[i] = n(rng);
    }
  }

 private:
  uint64_t seed_;
};

std::vector<float> RandomQuery(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> q(kShape.n_heads * kShape.head_dim);
  for (float& x : q) x = n(rng);
  return q;
}

// Positions the store selects for each query head at `layer` (one decode
// Select with query q at position `pos`).
std::vector<std::vector<int64_t>> Selected(ClusteredKvStore& store, int layer,
                                           const std::vector<float>& q) {
  store.set_record_selection(true);
  AttendSet set;
  const int64_t pos = store.num_tokens() - 1;
  store.Select(layer, LayerQuery{q.data(), &pos, 1}, &set);
  std::vector<std::vector<int64_t>> out;
  for (int h = 0; h < kShape.n_heads; ++h) {
    auto p = store.selected_positions(layer, h);
    std::sort(p.begin(), p.end());
    out.push_back(p);
  }
  return out;
}

// The cluster score as KernelSet::centroid_scores defines it: an FMA chain
// in element order.
float Dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s = std::fma(a[i], b[i], s);
  return s;
}

// Token-level formulation of clusterkv selection: order tokens by their
// cluster's score (desc), then cluster id, then position; take the first B.
std::vector<int64_t> BruteForceClusterKv(const ClusteredKvStore& store,
                                         int layer, int kv_head, const float* q,
                                         int64_t budget) {
  struct Tok {
    float score;
    int seg, cluster;
    int64_t pos;
  };
  std::vector<Tok> toks;
  const auto& segs = store.segments();
  for (size_t s = 0; s < segs.size(); ++s) {
    const HeadIndex& h = segs[s]->layer(layer).heads[kv_head];
    for (int c = 0; c < h.k; ++c) {
      // clusterkv scores the centroids as its panels hold them: in F16.
      std::vector<float> mu(kShape.head_dim);
      for (int d = 0; d < kShape.head_dim; ++d) {
        mu[d] = kernels::F16ToF32(
            kernels::F32ToF16(h.centroids[c * kShape.head_dim + d]));
      }
      const float sc = Dot(q, mu.data(), kShape.head_dim);
      for (int i = h.offsets[c]; i < h.offsets[c + 1]; ++i) {
        toks.push_back(
            {sc, static_cast<int>(s), c, segs[s]->first_pos() + h.members[i]});
      }
    }
  }
  std::sort(toks.begin(), toks.end(), [](const Tok& a, const Tok& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.seg != b.seg) return a.seg < b.seg;
    if (a.cluster != b.cluster) return a.cluster < b.cluster;
    return a.pos < b.pos;
  });
  std::vector<int64_t> out;
  for (size_t i = 0; i < toks.size() && static_cast<int64_t>(i) < budget; ++i) {
    out.push_back(toks[i].pos);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(KvStore, PromptSegmentTailAndWindowBoundaries) {
  ClusteredKvStore store(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr);
  Feeder f(1);
  f.Add(store, 100, AppendKind::kPrompt);
  ASSERT_EQ(store.segments().size(), 1u);
  EXPECT_EQ(store.segments()[0]->first_pos(), 4);
  EXPECT_EQ(store.segments()[0]->size(), 96);
  EXPECT_EQ(store.sink_count(), 4);
  EXPECT_EQ(store.tail_tokens(), 0);
  // k = ceil(96 / 10) = 10 clusters (fewer only if some came out empty).
  const HeadIndex& h = store.segments()[0]->layer(1).heads[0];
  EXPECT_LE(h.k, 10);
  EXPECT_EQ(h.offsets.back(), 96);
  for (int i = 0; i < 31; ++i) f.Add(store, 1, AppendKind::kGenerated);
  EXPECT_EQ(store.segments().size(), 1u);
  EXPECT_EQ(store.tail_tokens(), 31);
  f.Add(store, 1, AppendKind::kGenerated);  // tail reaches the window
  ASSERT_EQ(store.segments().size(), 2u);
  EXPECT_EQ(store.segments()[1]->first_pos(), 100);
  EXPECT_EQ(store.segments()[1]->size(), 32);
  EXPECT_EQ(store.tail_tokens(), 0);
  f.Add(store, 70, AppendKind::kGenerated);  // crosses two windows at once
  EXPECT_EQ(store.segments().size(), 4u);
  EXPECT_EQ(store.tail_tokens(), 6);
  f.Add(store, 5, AppendKind::kPrompt);  // the tail closes on its own first
  ASSERT_EQ(store.segments().size(), 6u);
  EXPECT_EQ(store.segments()[4]->size(), 6);
  EXPECT_EQ(store.segments()[5]->size(), 5);
  EXPECT_EQ(store.num_tokens(), 207);
  EXPECT_EQ(store.clustered_tokens(), 207 - 4);
}

TEST(KvStore, ShortPromptFillsSinksFirst) {
  ClusteredKvStore store(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr);
  Feeder f(2);
  f.Add(store, 3, AppendKind::kPrompt);
  EXPECT_EQ(store.sink_count(), 3);
  EXPECT_TRUE(store.segments().empty());
  f.Add(store, 10, AppendKind::kPrompt);
  EXPECT_EQ(store.sink_count(), 4);
  ASSERT_EQ(store.segments().size(), 1u);
  EXPECT_EQ(store.segments()[0]->first_pos(), 4);
  EXPECT_EQ(store.segments()[0]->size(), 9);
}

TEST(KvStore, ClusterKvSelectionMatchesBruteForce) {
  for (CacheMode mode : {CacheMode::kZeroCopy, CacheMode::kCopy}) {
    for (GqaSelection gqa :
         {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
      for (int budget : {1, 7, 40, 95, 1000, -1}) {
        // -1: budget 7 with a zero query: every cluster ties, so the order
        // is segment then cluster index.
        const bool zero_q = budget < 0;
        if (zero_q) budget = 7;
        KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
        c.cache_mode = mode;
        c.gqa_selection = gqa;
        c.budget = budget;
        ClusteredKvStore store(kShape, c, nullptr);
        Feeder f(3);
        f.Add(store, 150, AppendKind::kPrompt);
        f.Add(store, 40, AppendKind::kGenerated);
        auto q = RandomQuery(budget);
        if (zero_q) std::fill(q.begin(), q.end(), 0.0f);
        const auto got = Selected(store, 1, q);
        for (int h = 0; h < kShape.n_heads; ++h) {
          std::vector<float> qh(q.begin() + h * 16, q.begin() + (h + 1) * 16);
          if (gqa == GqaSelection::kPerKvHead) {
            const int first = (h / 2) * 2;
            for (int d = 0; d < 16; ++d)
              qh[d] = q[first * 16 + d] + q[(first + 1) * 16 + d];
          }
          EXPECT_EQ(got[h],
                    BruteForceClusterKv(store, 1, h / 2, qh.data(), budget))
              << GqaSelectionName(gqa) << " budget " << budget << " head " << h;
        }
      }
    }
  }
}

// Many steps on one store with a different query each: blocks come and go,
// so the copy arena grows, frees holes and compacts while a step is being
// gathered; every step's selection must still be the brute-force one.
TEST(KvStore, SelectionStaysExactAcrossManySteps) {
  for (CacheMode mode : {CacheMode::kZeroCopy, CacheMode::kCopy}) {
    for (int steps : {1, 2}) {
      KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
      c.cache_mode = mode;
      c.cache_steps = steps;
      c.budget = 40;
      ClusteredKvStore store(kShape, c, nullptr);
      Feeder f(11);
      f.Add(store, 400, AppendKind::kPrompt);
      for (int step = 0; step < 40; ++step) {
        const auto q = RandomQuery(100 + step);
        const auto got = Selected(store, 1, q);
        for (int h = 0; h < kShape.n_heads; ++h) {
          ASSERT_EQ(got[h], BruteForceClusterKv(store, 1, h / 2,
                                                q.data() + h * 16, c.budget))
              << "mode " << static_cast<int>(mode) << " cache_steps " << steps
              << " step " << step << " head " << h;
        }
      }
    }
  }
}

// A clustered segment stores its rows by cluster: cluster c is the stored
// rows [offsets[c], offsets[c+1]) holding members in order; the row map and
// the host spans (what dense attention reads) still give every position its
// own key and value, as in a store that keeps position order.
TEST(KvStore, ClusteredRowsAreStoredByCluster) {
  ClusteredKvStore clustered(kShape, SmallConfig(KvPolicy::kClusterKv),
                             nullptr);
  ClusteredKvStore plain(kShape, SmallConfig(KvPolicy::kStreaming), nullptr);
  Feeder f(8);
  for (ClusteredKvStore* s : {&clustered, &plain}) {
    f.Add(*s, 150, AppendKind::kPrompt);
    f.Add(*s, 40, AppendKind::kGenerated);
  }
  ASSERT_EQ(clustered.segments().size(), 2u);
  const int hd = kShape.head_dim;
  for (size_t i = 0; i < clustered.segments().size(); ++i) {
    const Segment& seg = *clustered.segments()[i];
    const Segment& ref = *plain.segments()[i];
    for (int g = 0; g < kShape.n_kv_heads; ++g) {
      EXPECT_EQ(seg.row_positions(0, g), nullptr);  // dense layer: no index
      const HeadIndex& h = seg.layer(1).heads[g];
      ASSERT_TRUE(h.rows_by_cluster());
      for (int c = 0; c < h.k; ++c) {
        for (int32_t r = 0; r < h.offsets[c + 1] - h.offsets[c]; ++r) {
          const int32_t stored = h.offsets[c] + r;
          std::vector<int32_t> row_of_block;
          AppendBlockRows(seg, 1, g, BlockKind::kCluster, c, r, 1, 16,
                          &row_of_block);
          EXPECT_EQ(row_of_block, std::vector<int32_t>{stored});
          const int32_t row = h.members[stored];
          EXPECT_EQ(seg.StoredRow(1, g, row), stored);
          EXPECT_EQ(seg.SegmentRow(1, g, stored), row);
          EXPECT_TRUE(std::equal(seg.keys(1, g) + stored * hd,
                                 seg.keys(1, g) + (stored + 1) * hd,
                                 ref.keys(1, g) + row * hd));
          EXPECT_TRUE(std::equal(seg.values(1, g) + stored * hd,
                                 seg.values(1, g) + (stored + 1) * hd,
                                 ref.values(1, g) + row * hd));
        }
      }
    }
  }
  for (int g = 0; g < kShape.n_kv_heads; ++g) {
    std::map<int64_t, std::vector<uint16_t>> got, want;
    using Rows = std::map<int64_t, std::vector<uint16_t>>;
    for (auto [store, out] :
         {std::pair<ClusteredKvStore*, Rows*>{&clustered, &got},
          {&plain, &want}}) {
      for (const kernels::KvSpan& s : store->HostSpans(1, g)) {
        for (int64_t r = 0; r < s.count; ++r) {
          const int64_t i = s.rows != nullptr ? s.rows[r] : r;
          const auto* k = static_cast<const uint16_t*>(s.k) + i * s.stride;
          (*out)[kernels::SpanRowPosition(s, r)].assign(k, k + hd);
        }
      }
    }
    EXPECT_EQ(got.size(), 190u);
    EXPECT_TRUE(got == want) << "KV head " << g;
  }
}

TEST(KvStore, RecentTokensAreAlwaysSelectedAndCountTowardBudget) {
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  c.budget = 30;
  c.recent_tokens = 12;
  ClusteredKvStore store(kShape, c, nullptr);
  Feeder f(4);
  f.Add(store, 120, AppendKind::kPrompt);
  const auto got = Selected(store, 1, RandomQuery(9));
  for (int h = 0; h < kShape.n_heads; ++h) {
    ASSERT_EQ(got[h].size(), 30u);
    std::set<int64_t> sel(got[h].begin(), got[h].end());
    for (int64_t p = 120 - 12; p < 120; ++p) EXPECT_TRUE(sel.count(p)) << p;
  }
}

// Non-finite activations (a NaN query) must not break the orderings: the
// selection stays a valid set of exactly B distinct clustered tokens.
TEST(KvStore, NanQuerySelectsExactlyTheBudget) {
  for (KvPolicy policy : {KvPolicy::kClusterKv, KvPolicy::kQuest}) {
    KvStoreConfig c = SmallConfig(policy);
    c.budget = 32;
    ClusteredKvStore store(kShape, c, nullptr);
    Feeder f(12);
    f.Add(store, 200, AppendKind::kPrompt);
    auto q = RandomQuery(13);
    for (size_t i = 0; i < q.size(); i += 3) q[i] = std::nanf("");
    const auto got = Selected(store, 1, q);
    for (int h = 0; h < kShape.n_heads; ++h) {
      const std::set<int64_t> distinct(got[h].begin(), got[h].end());
      EXPECT_EQ(distinct.size(), got[h].size()) << "head " << h;
      EXPECT_EQ(got[h].size(), 32u) << KvPolicyName(policy) << " head " << h;
      for (int64_t p : got[h]) EXPECT_TRUE(p >= 4 && p < 200) << p;
    }
  }
}

TEST(KvStore, QuestSelectsTopPagesByUpperBound) {
  KvStoreConfig c = SmallConfig(KvPolicy::kQuest);
  c.budget = 33;  // ceil(33/16) = 3 pages
  ClusteredKvStore store(kShape, c, nullptr);
  Feeder f(5);
  f.Add(store, 100, AppendKind::kPrompt);  // 96 rows: 6 pages of 16
  const auto q = RandomQuery(11);
  const auto got = Selected(store, 1, q);
  const Segment& seg = *store.segments()[0];
  for (int h = 0; h < kShape.n_heads; ++h) {
    // Brute force: page bounds from the stored keys, then the definition.
    std::vector<std::pair<float, int>> scores;
    for (int p = 0; p < 6; ++p) {
      float s = 0;
      for (int d = 0; d < 16; ++d) {
        float lo = 1e30f, hi = -1e30f;
        for (int r = p * 16; r < p * 16 + 16; ++r) {
          const int64_t row = seg.StoredRow(1, h / 2, r);
          const float k = kernels::F16ToF32(seg.keys(1, h / 2)[row * 16 + d]);
          lo = std::min(lo, k);
          hi = std::max(hi, k);
        }
        const float qd = q[h * 16 + d];
        s += std::max(qd * hi, qd * lo);
      }
      scores.push_back({-s, p});
    }
    std::sort(scores.begin(), scores.end());
    std::vector<int64_t> want;
    for (int i = 0; i < 3; ++i) {
      for (int r = 0; r < 16; ++r)
        want.push_back(4 + scores[i].second * 16 + r);
    }
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got[h], want) << "head " << h;
  }
}

TEST(KvStore, StreamingSelectsMostRecentClusteredTokens) {
  KvStoreConfig c = SmallConfig(KvPolicy::kStreaming);
  c.budget = 25;
  ClusteredKvStore store(kShape, c, nullptr);
  Feeder f(6);
  f.Add(store, 60, AppendKind::kPrompt);
  f.Add(store, 32, AppendKind::kGenerated);  // closes a window segment
  f.Add(store, 3, AppendKind::kGenerated);   // tail
  const auto got = Selected(store, 1, RandomQuery(1));
  std::vector<int64_t> want;
  for (int64_t p = 92 - 25; p < 92; ++p) want.push_back(p);
  for (int h = 0; h < kShape.n_heads; ++h) EXPECT_EQ(got[h], want);
}

TEST(KvStore, CacheAccountingAndReuse) {
  for (CacheMode mode : {CacheMode::kZeroCopy, CacheMode::kCopy})
    for (int steps : {0, 1, 3}) {
      KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
      c.cache_mode = mode;
      c.cache_steps = steps;
      ClusteredKvStore store(kShape, c, nullptr);
      Feeder f(7);
      f.Add(store, 200, AppendKind::kPrompt);
      const auto q = RandomQuery(3);
      Selected(store, 1, q);
      const CacheStats first = store.cache_stats();
      EXPECT_EQ(first.hits, 0);
      Selected(store, 1, q);  // same query: same blocks
      const CacheStats s = store.cache_stats();
      EXPECT_EQ(s.hits + s.misses, s.lookups);
      EXPECT_EQ(s.h2d_bytes, s.miss_tokens * 2 * 2 * kShape.head_dim);
      if (steps == 0) {
        EXPECT_EQ(s.hits, 0);
      } else {
        EXPECT_EQ(s.misses, first.misses) << "second step must hit everything";
        EXPECT_EQ(s.hits, first.lookups);
      }
    }
}

TEST(KvStore, AsyncClusteringEqualsInline) {
  ClusterWorker worker;
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  ClusteredKvStore inline_store(kShape, c, nullptr);
  c.async_clustering = true;
  ClusteredKvStore async_store(kShape, c, &worker);
  Feeder f(8);
  for (auto* s : {&inline_store, &async_store}) {
    f.Add(*s, 300, AppendKind::kPrompt);
    f.Add(*s, 40, AppendKind::kGenerated);
  }
  const auto q = RandomQuery(5);
  EXPECT_EQ(Selected(inline_store, 1, q), Selected(async_store, 1, q));
}

// The worker runs urgent jobs (segments closed by decoding) before queued
// bulk ones (a prompt's segments), each class in submission order; Wait and
// IsDone are per job.
TEST(ClusterWorkerTest, UrgentJobsOvertakeQueuedBulkJobs) {
  ClusterWorker worker;
  std::promise<void> release_first, release_last;
  std::shared_future<void> first = release_first.get_future().share();
  std::shared_future<void> last = release_last.get_future().share();
  std::mutex mu;
  std::string order;
  auto log = [&](char c) {
    std::lock_guard<std::mutex> l(mu);
    order += c;
  };
  std::promise<void> a_started;
  const int64_t a = worker.Submit([&] {
    a_started.set_value();
    first.wait();
    log('a');
  });
  a_started.get_future().wait();  // a runs: the rest queue behind it
  const int64_t b = worker.Submit([&] { log('b'); });
  const int64_t c = worker.Submit([&] {
    last.wait();
    log('c');
  });
  const int64_t u = worker.Submit([&] { log('u'); }, JobUrgency::kUrgent);
  const int64_t v = worker.Submit([&] { log('v'); }, JobUrgency::kUrgent);
  EXPECT_LT(a, b);
  EXPECT_LT(c, u);
  EXPECT_FALSE(worker.IsDone(u));
  EXPECT_TRUE(worker.IsDone(0));
  release_first.set_value();
  // v runs although bulk job c is still held (polled, so that a worker
  // that ran c first fails here instead of hanging).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!worker.IsDone(v) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(worker.IsDone(v));
  EXPECT_TRUE(worker.IsDone(u));
  EXPECT_TRUE(worker.IsDone(a));
  EXPECT_FALSE(worker.IsDone(c));
  worker.Wait(b);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(order, "auvb") << "a was running; u, v overtake b";
  }
  release_last.set_value();
  worker.Wait(c);
  for (int64_t t : {a, b, c, u, v}) EXPECT_TRUE(worker.IsDone(t));
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(order, "auvbc");
}

// A decoding store's window segment is indexed while bulk work queued
// before it (another store's prompt, then a held job) still waits on the
// shared worker: the decoding session's next step waits only for its own
// segment. In submission order it would wait behind the held job.
TEST(ClusterWorkerTest, DecodingStoreIsNotHeldBehindAPromptBurst) {
  ClusterWorker worker;
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  c.async_clustering = true;
  ClusteredKvStore decoding(kShape, c, &worker), prompt(kShape, c, &worker);
  Feeder f(9);
  f.Add(decoding, 40, AppendKind::kPrompt);
  worker.Wait(worker.Submit([] {}));  // the decoding store's prompt indexed
  std::promise<void> release_first, release_last;
  std::shared_future<void> first = release_first.get_future().share();
  std::shared_future<void> last = release_last.get_future().share();
  worker.Submit([&] { first.wait(); });     // running: holds the worker
  f.Add(prompt, 300, AppendKind::kPrompt);  // bulk jobs queue behind it
  const int64_t held = worker.Submit([&] { last.wait(); });  // bulk, held
  f.Add(decoding, c.window, AppendKind::kGenerated);         // closes a window
  EXPECT_FALSE(decoding.IndexReady());
  release_first.set_value();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!decoding.IndexReady() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(decoding.IndexReady()) << "held behind bulk work";
  EXPECT_FALSE(worker.IsDone(held));
  release_last.set_value();
  worker.Wait(held);
  EXPECT_TRUE(prompt.IndexReady());
}

TEST(KvStore, ForkSharesSegmentsAndKeepsItsOwnTail) {
  ClusteredKvStore parent(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr);
  Feeder f(9);
  f.Add(parent, 120, AppendKind::kPrompt);
  f.Add(parent, 5, AppendKind::kGenerated);
  auto child = parent.Fork();
  ASSERT_TRUE(child.ok());
  EXPECT_EQ((*child)->num_tokens(), 125);
  EXPECT_EQ((*child)->segments()[0].get(), parent.segments()[0].get());
  EXPECT_GT(parent.memory().host_shared_bytes, 0);
  Feeder g(10);
  g.Add(**child, 3, AppendKind::kGenerated);
  EXPECT_EQ((*child)->tail_tokens(), 8);
  EXPECT_EQ(parent.tail_tokens(), 5);
  const auto q = RandomQuery(2);
  EXPECT_EQ(Selected(parent, 1, q), Selected(**child, 1, q));
}

TEST(KvStore, CapacityIsEnforced) {
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  c.max_tokens = 50;
  ClusteredKvStore store(kShape, c, nullptr);
  EXPECT_TRUE(store.Reserve(50, AppendKind::kPrompt).ok());
  EXPECT_TRUE(store.Reserve(0, AppendKind::kPrompt).ok());
  EXPECT_EQ(store.Reserve(51, AppendKind::kPrompt).code(),
            absl::StatusCode::kResourceExhausted);
}

// A sliding-window layer is never indexed and attends only its window:
// the rows at positions p - window + 1 .. p, for decode and for prompts.
TEST(KvStore, SlidingWindowLayerAttendsItsWindowDensely) {
  KvShape shape = kShape;
  shape.layer_window = {0, 24};  // layer 1 is local
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  c.dense_layers = 0;  // layer 0 clusters, layer 1 does not
  ClusteredKvStore store(shape, c, nullptr);
  Feeder feed(9);
  feed.Add(store, 150, AppendKind::kPrompt);
  for (int i = 0; i < 40; ++i) feed.Add(store, 1, AppendKind::kGenerated);
  ASSERT_GE(store.segments().size(), 2u);
  for (const auto& seg : store.segments()) {
    EXPECT_FALSE(seg->layer(0).heads.empty());
    EXPECT_TRUE(seg->layer(1).heads.empty());
  }
  const auto q = RandomQuery(3);
  for (int n_q : {1, 5}) {
    std::vector<int64_t> pos(n_q);
    for (int i = 0; i < n_q; ++i) pos[i] = store.num_tokens() - n_q + i;
    AttendSet set;
    store.Select(1, LayerQuery{q.data(), pos.data(), n_q}, &set);
    ASSERT_EQ(set.per_head.size(), static_cast<size_t>(kShape.n_heads));
    for (const auto& list : set.per_head) {
      int64_t rows = 0, lo = INT64_MAX, hi = -1;
      for (int i = 0; i < list.count; ++i) {
        const auto& sp = list.spans[i];
        rows += sp.count;
        if (sp.count == 0) continue;
        lo = std::min(lo, sp.first_pos);
        hi = std::max(hi, sp.first_pos + sp.count - 1);
      }
      EXPECT_EQ(rows, 24 + n_q - 1) << "n_q " << n_q;
      EXPECT_EQ(lo, pos[0] - 23);
      EXPECT_EQ(hi, store.num_tokens() - 1);
    }
  }
}

// Resident segment rows from a backend's factory (host memory here), each
// counting the steps that used it.
class CountingResidentRows final : public CacheRowsFactory {
 public:
  std::unique_ptr<CacheRows> NewRows(int head_dim) override {
    return NewHostCacheRows(head_dim);
  }
  std::unique_ptr<CacheRows> NewResidentRows(int head_dim, int64_t /*rows*/,
                                             bool /*asked_before*/) override {
    ++made;
    return std::make_unique<Counted>(NewHostCacheRows(head_dim), &uses);
  }
  int made = 0, uses = 0;

 private:
  class Counted final : public CacheRows {
   public:
    Counted(std::unique_ptr<CacheRows> rows, int* uses)
        : rows_(std::move(rows)), uses_(uses) {}
    void Reserve(int64_t rows, int64_t keep) override {
      rows_->Reserve(rows, keep);
    }
    void Write(int64_t at, const uint16_t* k, const uint16_t* v,
               int64_t n) override {
      rows_->Write(at, k, v, n);
    }
    void MoveDown(int64_t to, int64_t from, int64_t n) override {
      rows_->MoveDown(to, from, n);
    }
    int64_t capacity() const override { return rows_->capacity(); }
    const uint16_t* keys() const override { return rows_->keys(); }
    const uint16_t* values() const override { return rows_->values(); }
    bool Use() override {
      ++*uses_;
      return true;
    }

   private:
    std::unique_ptr<CacheRows> rows_;
    int* uses_;
  };
};

// Residency follows sessions: a sparse decode step keeps every segment of
// the layer in use on the backend (resident rows made or used), not only
// the segments it selects from, so a decoding session's segments are never
// the idle ones an arena evicts under pressure.
TEST(KvStore, SparseStepUsesEverySegmentsResidentRows) {
  auto rows = std::make_shared<CountingResidentRows>();
  StoreEnv env;
  env.cache_rows = rows;
  ClusteredKvStore store(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr,
                         env);
  Feeder f(5);
  f.Add(store, 100, AppendKind::kPrompt);
  f.Add(store, 200, AppendKind::kGenerated);
  const size_t n_segs = store.segments().size();
  ASSERT_GE(n_segs, 6u);
  const auto picked = Selected(store, /*layer=*/1, RandomQuery(3));
  // The budget (40 tokens) leaves some segments unselected.
  std::set<int64_t> touched;
  for (const auto& head : picked) {
    for (const int64_t pos : head) {
      for (size_t s = 0; s < n_segs; ++s) {
        const Segment& seg = *store.segments()[s];
        if (pos >= seg.first_pos() && pos < seg.first_pos() + seg.size()) {
          touched.insert(static_cast<int64_t>(s));
        }
      }
    }
  }
  EXPECT_LT(touched.size(), n_segs);
  EXPECT_EQ(rows->made, static_cast<int>(n_segs));
  const int uses = rows->uses;
  Selected(store, 1, RandomQuery(4));
  EXPECT_EQ(rows->made, static_cast<int>(n_segs));  // made once
  EXPECT_GE(rows->uses - uses, static_cast<int>(n_segs));
}

}  // namespace
}  // namespace ckv
