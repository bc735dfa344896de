// The automatic prefix cache (server/prefix_cache.h): block-granular reuse,
// tenants and layouts apart, the byte budget with LRU eviction, segments
// that live only while cached, the SessionManager hook and its memory
// totals, and over gRPC: greedy output with a cache hit equals the output
// of the same request computed from scratch, and cached_tokens says what
// was reused.
#include "server/prefix_cache.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/make_random.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/server_runner.h"
#include "server/session_manager.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;

constexpr int64_t kBlock = 64;

KvShape Shape() { return KvShape{2, 2, 1, 16}; }

KvStoreConfig Kv() {
  KvStoreConfig c;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 16;
  c.window = 32;
  c.budget = 32;
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

std::vector<int32_t> Tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& id : t) id = 3 + static_cast<int32_t>(rng() % 256);
  return t;
}

// Appends n prompt tokens of random K,V to `store` in one call.
void Feed(ClusteredKvStore& store, int64_t n, uint32_t seed) {
  const KvShape& s = store.shape();
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> k(size_t{1} * n * s.n_kv_heads * s.head_dim), v(k.size());
  ASSERT_TRUE(store.Reserve(n, AppendKind::kPrompt).ok());
  for (int l = 0; l < s.n_layers; ++l) {
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    store.Append(l, n, k.data(), v.data());
  }
  store.Commit(n);
}

std::unique_ptr<ClusteredKvStore> Prefilled(int64_t n, uint32_t seed,
                                            const KvStoreConfig& kv = Kv()) {
  auto store = std::make_unique<ClusteredKvStore>(Shape(), kv, nullptr);
  store->set_prompt_block_tokens(kBlock);
  Feed(*store, n, seed);
  return store;
}

TEST(PromptBlocks, PromptSegmentsCloseAtBlockBoundaries) {
  auto store = Prefilled(200, 1);
  const auto& segs = store->segments();
  ASSERT_EQ(segs.size(), 4u);
  const int64_t want[][2] = {{4, 60}, {64, 64}, {128, 64}, {192, 8}};
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(segs[i]->first_pos(), want[i][0]) << i;
    EXPECT_EQ(segs[i]->size(), want[i][1]) << i;
  }
  auto prefix = store->ForkPrefix(2);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_EQ((*prefix)->num_tokens(), 128);
  EXPECT_EQ((*prefix)->tail_tokens(), 0);
  ASSERT_EQ((*prefix)->segments().size(), 2u);
  EXPECT_EQ((*prefix)->segments()[1], segs[1]);  // shared, not copied
  EXPECT_FALSE(store->ForkPrefix(0).ok());
  EXPECT_FALSE(store->ForkPrefix(5).ok());
  // Without blocks a prompt call is one segment.
  ClusteredKvStore plain(Shape(), Kv(), nullptr);
  Feed(plain, 200, 1);
  EXPECT_EQ(plain.segments().size(), 1u);
}

TEST(PrefixCache, ReusesWholeBlocksUpToTheFirstDifference) {
  PrefixCache cache(int64_t{1} << 30, kBlock);
  const std::vector<int32_t> doc = Tokens(256, 1);
  auto store = Prefilled(256, 1);
  EXPECT_EQ(cache.Insert("", doc, 4, *store), 4);
  EXPECT_EQ(cache.Insert("", doc, 4, *store), 0);  // already there
  EXPECT_EQ(cache.stats().blocks, 4);

  EXPECT_EQ(cache.Lookup("", Kv(), doc, 4).tokens, 256);
  EXPECT_EQ(cache.Lookup("", Kv(), doc, 3).tokens, 192);  // capped
  std::vector<int32_t> other = doc;
  other[150] = other[150] == 7 ? 8 : 7;  // block 2 differs
  PrefixCache::Match m = cache.Lookup("", Kv(), other, 4);
  EXPECT_EQ(m.tokens, 128);
  ASSERT_NE(m.store, nullptr);
  EXPECT_EQ(m.store->num_tokens(), 128);
  EXPECT_EQ(m.store->segments()[1], store->segments()[1]);
  other[10] = other[10] == 7 ? 8 : 7;  // block 0 differs
  EXPECT_EQ(cache.Lookup("", Kv(), other, 4).store, nullptr);
  // A prompt shorter than a block cannot match.
  EXPECT_EQ(
      cache.Lookup("", Kv(), absl::MakeSpan(doc).subspan(0, 63), 4).tokens, 0);
  const PrefixCacheStats st = cache.stats();
  EXPECT_EQ(st.hits, 3);
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(st.reused_tokens, 256 + 192 + 128);
}

TEST(PrefixCache, TenantsAndLayoutsNeverShareBlocks) {
  PrefixCache cache(int64_t{1} << 30, kBlock);
  const std::vector<int32_t> doc = Tokens(192, 2);
  auto store = Prefilled(192, 2);
  ASSERT_EQ(cache.Insert("alice", doc, 3, *store), 3);
  EXPECT_EQ(cache.Lookup("bob", Kv(), doc, 3).store, nullptr);
  EXPECT_EQ(cache.Lookup("", Kv(), doc, 3).store, nullptr);
  KvStoreConfig other = Kv();
  other.tokens_per_cluster = 32;  // shapes the segments' clusters
  EXPECT_EQ(cache.Lookup("alice", other, doc, 3).store, nullptr);
  EXPECT_EQ(cache.Lookup("alice", Kv(), doc, 3).tokens, 192);
  const std::string bob = "bob", alice = "alice";
  std::vector<std::pair<int64_t, int64_t>> of_bob, of_alice;
  cache.AppendSegments(&bob, &of_bob);
  cache.AppendSegments(&alice, &of_alice);
  EXPECT_TRUE(of_bob.empty());
  EXPECT_EQ(of_alice.size(), 3u);
}

// Bytes that caching `tokens` (fed from `seed`) costs.
int64_t BytesOf(const std::vector<int32_t>& tokens, uint32_t seed) {
  PrefixCache cache(int64_t{1} << 30, kBlock);
  auto store = Prefilled(static_cast<int64_t>(tokens.size()), seed);
  cache.Insert("", tokens, static_cast<int64_t>(tokens.size()) / kBlock,
               *store);
  return cache.stats().bytes;
}

TEST(PrefixCache, BudgetEvictsLeastRecentlyUsedBlocks) {
  const auto x = Tokens(128, 11), y = Tokens(128, 12), z = Tokens(128, 13);
  const int64_t two_blocks = BytesOf(x, 11);
  ASSERT_GT(two_blocks, 0);
  ASSERT_EQ(BytesOf(y, 12), two_blocks);  // same sizes, same clusters
  PrefixCache cache(2 * two_blocks, kBlock);
  cache.Insert("", x, 2, *Prefilled(128, 11));
  cache.Insert("", y, 2, *Prefilled(128, 12));
  EXPECT_EQ(cache.stats().bytes, 2 * two_blocks);
  EXPECT_EQ(cache.stats().evictions, 0);
  EXPECT_EQ(cache.Lookup("", Kv(), x, 2).tokens, 128);  // x: most recent
  cache.Insert("", z, 2, *Prefilled(128, 13));
  const PrefixCacheStats st = cache.stats();
  EXPECT_LE(st.bytes, st.max_bytes);
  EXPECT_EQ(st.evictions, 2);  // both of y's blocks, leaf first
  EXPECT_EQ(st.blocks, 4);
  EXPECT_EQ(cache.Lookup("", Kv(), y, 2).store, nullptr);
  EXPECT_EQ(cache.Lookup("", Kv(), x, 2).tokens, 128);
  EXPECT_EQ(cache.Lookup("", Kv(), z, 2).tokens, 128);
  // A budget below one block caches nothing.
  PrefixCache tiny(1, kBlock);
  tiny.Insert("", x, 2, *Prefilled(128, 11));
  EXPECT_EQ(tiny.stats().blocks, 0);
  EXPECT_EQ(tiny.stats().bytes, 0);
}

TEST(PrefixCache, SegmentsLiveOnlyWhileCached) {
  const auto x = Tokens(128, 21), y = Tokens(128, 22);
  PrefixCache cache(BytesOf(x, 21), kBlock);
  std::vector<std::weak_ptr<Segment>> held;
  {
    auto store = Prefilled(128, 21);
    cache.Insert("", x, 2, *store);
    for (const auto& seg : store->segments()) held.push_back(seg);
  }
  ASSERT_EQ(held.size(), 2u);
  for (const auto& w : held) EXPECT_FALSE(w.expired());  // the cache's
  cache.Insert("", y, 2, *Prefilled(128, 22));           // evicts x
  for (const auto& w : held) EXPECT_TRUE(w.expired());
  EXPECT_EQ(cache.Lookup("", Kv(), y, 2).tokens, 128);
}

TEST(PrefixCache, OffCachesNothing) {
  PrefixCache cache(0, kBlock);
  EXPECT_FALSE(cache.enabled());
  const auto x = Tokens(128, 1);
  EXPECT_EQ(cache.Insert("", x, 2, *Prefilled(128, 1)), 0);
  EXPECT_EQ(cache.Lookup("", Kv(), x, 2).store, nullptr);
  EXPECT_EQ(cache.stats().misses, 0);
}

// ------------------------------------------------ the SessionManager hook

ModelConfig TinyModel() {
  ModelConfig m;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.head_dim = 16;
  return m;
}

ServerLimits CacheLimits() {
  ServerLimits l;
  l.prefix_cache_block_tokens = kBlock;
  return l;
}

// One session-less request of `tenant` for `prompt` through the hook, its
// prefill simulated on the store; returns the tokens reused.
int64_t Request(SessionManager& sessions, const std::string& tenant,
                const std::vector<int32_t>& prompt, int64_t* prefilled) {
  SessionOptions o;
  o.kv = Kv();
  o.tenant = tenant;
  auto session = sessions.Create(o);
  EXPECT_TRUE(session.ok()) << session.status();
  auto lease = sessions.Acquire((*session)->id(), tenant);
  EXPECT_TRUE(lease.ok()) << lease.status();
  JobSpec spec;
  spec.lease = *std::move(lease);
  spec.input = prompt;
  spec.kind = AppendKind::kPrompt;
  bool chained = false;
  spec.callbacks.before_release = [&chained](const JobResult&, Session&) {
    chained = true;
  };
  const int64_t reused = sessions.UsePrefixCache(spec, nullptr);
  Session& s = *spec.lease.get();
  EXPECT_EQ(s.store().num_tokens(), reused);
  EXPECT_EQ(static_cast<int64_t>(spec.input.size()),
            static_cast<int64_t>(prompt.size()) - reused);
  *prefilled = static_cast<int64_t>(spec.input.size());
  Feed(s.store(), *prefilled, 5);
  spec.callbacks.before_release(JobResult(), s);
  EXPECT_TRUE(chained);  // the caller's callback still runs
  s.PublishStats();
  spec.lease = SessionLease();
  EXPECT_TRUE(sessions.Close((*session)->id(), tenant).ok());
  return reused;
}

TEST(SessionManagerPrefixCache, ReusesPerTenantAndCountsTheCacheInTotals) {
  SessionManager sessions(TinyModel(), CacheLimits(), nullptr);
  const std::vector<int32_t> doc = Tokens(256, 3);
  std::vector<int32_t> q1 = doc, q2 = doc;
  for (int32_t t : Tokens(20, 4)) q1.push_back(t);
  for (int32_t t : Tokens(30, 5)) q2.push_back(t);
  int64_t prefilled = 0;
  EXPECT_EQ(Request(sessions, "a", q1, &prefilled), 0);
  EXPECT_EQ(prefilled, 276);
  // The session is closed; its whole blocks live on in the cache, counted
  // in the totals admission checks.
  const MemoryTotals after = sessions.Totals();
  EXPECT_EQ(after.sessions, 0);
  EXPECT_GT(after.host_bytes, 0);
  EXPECT_EQ(after.host_bytes, sessions.prefix_cache().stats().bytes);
  EXPECT_EQ(sessions.TenantTotals("a").host_bytes, after.host_bytes);
  EXPECT_EQ(sessions.TenantTotals("b").host_bytes, 0);

  EXPECT_EQ(Request(sessions, "b", q2, &prefilled), 0);  // another tenant
  EXPECT_EQ(prefilled, 286);
  EXPECT_EQ(Request(sessions, "a", q2, &prefilled), 256);
  EXPECT_EQ(prefilled, 30);
  // A prompt of exactly the cached blocks still prefills its last block.
  EXPECT_EQ(Request(sessions, "a", doc, &prefilled), 192);
  EXPECT_EQ(prefilled, 64);
}

TEST(SessionManagerPrefixCache, SessionsWithTokensAreLeftAlone) {
  SessionManager sessions(TinyModel(), CacheLimits(), nullptr);
  SessionOptions o;
  o.kv = Kv();
  auto session = sessions.Create(o);
  ASSERT_TRUE(session.ok());
  auto lease = sessions.Acquire((*session)->id());
  ASSERT_TRUE(lease.ok());
  JobSpec spec;
  spec.lease = *std::move(lease);
  spec.input = Tokens(200, 1);
  spec.kind = AppendKind::kGenerated;  // a Decode onto a session
  EXPECT_EQ(sessions.UsePrefixCache(spec, nullptr), 0);
  EXPECT_FALSE(spec.callbacks.before_release);
  EXPECT_EQ(spec.lease->store().prompt_block_tokens(), 0);
}

// --------------------------------------------------------------- over gRPC

RandomModelSpec ModelSpec() {
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = 7;
  return s;
}

ServerMetrics* Metrics() {
  static ServerMetrics* m = ServerMetrics::Create().release();
  return m;
}

struct Served {
  std::vector<int32_t> ids;
  v1::DecodeSummary summary;
};

class Server {
 public:
  explicit Server(int64_t cache_bytes) {
    ServerConfig c = testing::SmallServerConfig(
        ckv::testing::RandomModelPath("prefix", ModelSpec()));
    c.limits.max_prompt_tokens = 1024;
    c.limits.prefix_cache_bytes = cache_bytes;
    c.limits.prefix_cache_block_tokens = kBlock;
    c.sampling.max_tokens = 16;
    auto s = ClusterKvServer::Start(c, Metrics());
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::ClusterKv::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }
  Served Generate(const std::vector<int32_t>& prompt) {
    v1::GenerateRequest req;
    for (int32_t t : prompt) req.mutable_tokens()->add_ids(t);
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    Served out;
    v1::DecodeResponse r;
    while (reader->Read(&r)) {
      if (r.has_token() && r.token().id() >= 0) {
        out.ids.push_back(r.token().id());
      }
      if (r.has_summary()) out.summary = r.summary();
    }
    const grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }

 private:
  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

std::vector<int32_t> Join(std::vector<int32_t> a,
                          const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixCacheService, GreedyOutputWithAHitEqualsTheSameRequestFromScratch) {
  const std::vector<int32_t> doc = Tokens(320, 31);
  const auto q1 = Join(doc, Tokens(24, 32));
  const auto q2 = Join(doc, Tokens(40, 33));
  std::vector<int32_t> edited = q2;
  edited[200] = edited[200] == 7 ? 8 : 7;  // block 3 of 5 differs

  Server fresh(int64_t{1} << 30);  // each request its own prefix: misses
  const Served q2_alone = fresh.Generate(q2);
  EXPECT_EQ(q2_alone.summary.cached_tokens(), 0);
  Server other(int64_t{1} << 30);
  const Served edited_alone = other.Generate(edited);

  Server server(int64_t{1} << 30);
  const Served a = server.Generate(q1);
  EXPECT_EQ(a.summary.cached_tokens(), 0);
  EXPECT_EQ(a.summary.input_tokens(), 344);
  const Served b = server.Generate(q2);  // the document's 5 blocks
  EXPECT_EQ(b.summary.cached_tokens(), 320);
  EXPECT_EQ(b.summary.input_tokens(), 360);
  EXPECT_EQ(b.summary.session_tokens(), q2_alone.summary.session_tokens());
  ASSERT_FALSE(b.ids.empty());
  EXPECT_EQ(b.ids, q2_alone.ids);
  const Served a2 = server.Generate(q1);
  EXPECT_EQ(a2.summary.cached_tokens(), 320);
  EXPECT_EQ(a2.ids, a.ids);
  // Differing in block 3: blocks 0..2 reused, nothing beyond.
  const Served e = server.Generate(edited);
  EXPECT_EQ(e.summary.cached_tokens(), 192);
  EXPECT_EQ(e.ids, edited_alone.ids);
}

TEST(PrefixCacheService, OffReusesNothing) {
  Server server(0);
  const auto q = Join(Tokens(256, 41), Tokens(8, 42));
  const Served a = server.Generate(q);
  const Served b = server.Generate(q);
  EXPECT_EQ(b.summary.cached_tokens(), 0);
  EXPECT_EQ(b.ids, a.ids);
}

}  // namespace
}  // namespace ckv::server
