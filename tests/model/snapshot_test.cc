// Session snapshots (model/kv/snapshot.h): store -> bytes -> store keeps
// every byte, selection and greedy continuation; corrupt, truncated and
// mismatched snapshots give clear errors; hostile parts are refused.
#include "model/kv/snapshot.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "model/kv/checksum.h"
#include "model/kv/policies/registry.h"
#include "model/kv/snapshot_settings.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

const KvShape kShape{/*n_layers=*/3, /*n_heads=*/4, /*n_kv_heads=*/2,
                     /*head_dim=*/16};
constexpr uint64_t kModelFp = 0x1234abcd;

KvStoreConfig SmallConfig(KvPolicy policy) {
  KvStoreConfig c;
  c.policy = policy;
  c.budget = 24;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 8;
  c.window = 16;
  c.dense_layers = 1;
  c.max_tokens = 4096;  // as SnapshotExpect: restored stores serialize equal
  return c;
}

SnapshotExpect Expect(const KvShape& shape = kShape) {
  SnapshotExpect e;
  e.model_fingerprint = kModelFp;
  e.shape = shape;
  e.vocab_size = 10;
  e.max_tokens = 4096;
  return e;
}

// Random K,V rows clustered around a few directions.
void Feed(ClusteredKvStore& store, int64_t n, AppendKind kind, uint64_t seed) {
  ASSERT_TRUE(store.Reserve(n, kind).ok());
  const KvShape& s = store.shape();
  const int width = s.n_kv_heads * s.head_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(n * width), v(n * width);
  for (int l = 0; l < s.n_layers; ++l) {
    for (int64_t i = 0; i < n * width; ++i) {
      k[i] = 0.3f * g(rng) + ((i % s.head_dim) % 5 == int(rng() % 5) ? 3 : 0);
      v[i] = g(rng);
    }
    store.Append(l, n, k.data(), v.data());
  }
  store.Commit(n);
}

Snapshot SnapshotOf(const ClusteredKvStore& store) {
  auto parts = store.Export();
  EXPECT_TRUE(parts.ok()) << parts.status();
  Snapshot s;
  s.meta.session_id = "s-1";
  s.meta.parent_id = "s-0";
  s.meta.tenant = "team-a";
  s.meta.idle_ttl_seconds = 77;
  s.meta.sampling.temperature = 0.5f;
  s.meta.sampling.stop = {"\n\n", "END"};
  s.meta.last_logits = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  s.store = *std::move(parts);
  return s;
}

// A store with sinks, two prompt segments, a closed generated segment and
// an open tail; clustering ran on `worker`.
std::unique_ptr<ClusteredKvStore> MakeStore(const KvStoreConfig& c,
                                            ClusterWorker* worker) {
  auto store = std::make_unique<ClusteredKvStore>(kShape, c, worker);
  Feed(*store, 50, AppendKind::kPrompt, 1);
  Feed(*store, 30, AppendKind::kPrompt, 2);
  for (int i = 0; i < 21; ++i) Feed(*store, 1, AppendKind::kGenerated, 10 + i);
  return store;
}

std::unique_ptr<ClusteredKvStore> RoundTrip(const std::string& bytes,
                                            ClusterWorker* worker,
                                            Snapshot* out = nullptr) {
  auto parsed = ParseSnapshot(bytes, Expect());
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return nullptr;
  if (out != nullptr) out->meta = parsed->meta;
  auto store = ClusteredKvStore::Restore(std::move(parsed->store), worker);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<std::vector<int64_t>> Selected(ClusteredKvStore& store, int layer,
                                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> q(kShape.n_heads * kShape.head_dim);
  for (float& x : q) x = g(rng);
  store.set_record_selection(true);
  AttendSet set;
  const int64_t pos = store.num_tokens();
  store.Select(layer, LayerQuery{q.data(), &pos, 1}, &set);
  std::vector<std::vector<int64_t>> out;
  for (int h = 0; h < kShape.n_heads; ++h) {
    out.push_back(store.selected_positions(layer, h));
  }
  return out;
}

TEST(ChecksumTest, Crc32cCheckValue) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  // Split anywhere: the same CRC.
  const std::string s = "the quick brown fox jumps over the lazy dog!";
  for (size_t i = 0; i <= s.size(); ++i) {
    EXPECT_EQ(Crc32c(Crc32c(0, s.data(), i), s.data() + i, s.size() - i),
              Crc32c(0, s.data(), s.size()));
  }
}

class SnapshotPolicyTest : public ::testing::TestWithParam<KvPolicy> {};

TEST_P(SnapshotPolicyTest, RoundTripKeepsBytesAndSelections) {
  ClusterWorker worker;
  KvStoreConfig c = SmallConfig(GetParam());
  // A policy that selects without an index restores indexes it does not
  // need (built for forks that switch policy).
  const PolicyInfo* info = FindPolicy(GetParam());
  ASSERT_NE(info, nullptr);
  c.build_all_indexes = info->selects && info->indexes == 0;
  auto store = MakeStore(c, &worker);
  const std::string bytes = SerializeSnapshot(SnapshotOf(*store), kModelFp);
  Snapshot meta;
  auto restored = RoundTrip(bytes, &worker, &meta);
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(meta.meta.session_id, "s-1");
  EXPECT_EQ(meta.meta.parent_id, "s-0");
  EXPECT_EQ(meta.meta.tenant, "team-a");
  EXPECT_EQ(meta.meta.idle_ttl_seconds, 77u);
  EXPECT_EQ(meta.meta.sampling.temperature, 0.5f);
  EXPECT_EQ(meta.meta.sampling.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(meta.meta.last_logits.size(), 10u);
  EXPECT_EQ(restored->num_tokens(), store->num_tokens());
  EXPECT_EQ(restored->segments().size(), store->segments().size());
  EXPECT_EQ(restored->tail_tokens(), store->tail_tokens());
  EXPECT_GT(restored->tail_tokens(), 0);
  // Everything written is read back: the restored store serializes equal.
  EXPECT_TRUE(SerializeSnapshot(SnapshotOf(*restored), kModelFp) == bytes);
  for (int layer = 0; layer < kShape.n_layers; ++layer) {
    for (uint64_t q = 0; q < 4; ++q) {
      EXPECT_EQ(Selected(*restored, layer, q), Selected(*store, layer, q))
          << "layer " << layer << " query " << q;
    }
  }
  // Both go on identically (a new segment is clustered after the restore).
  for (int i = 0; i < 20; ++i) {
    Feed(*store, 1, AppendKind::kGenerated, 100 + i);
    Feed(*restored, 1, AppendKind::kGenerated, 100 + i);
  }
  EXPECT_EQ(Selected(*restored, 2, 9), Selected(*store, 2, 9));
}

std::vector<KvPolicy> AllPolicies() {
  std::vector<KvPolicy> ids;
  for (const PolicyInfo& p : RegisteredPolicies()) ids.push_back(p.id);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(Policies, SnapshotPolicyTest,
                         ::testing::ValuesIn(AllPolicies()),
                         [](const auto& info) {
                           return std::string(KvPolicyName(info.param));
                         });

// Files of format version 1, written before the policies moved behind the
// registry (tests/model/testdata/snapshots/README.md), load, restore and
// select as a store built now.
TEST(SnapshotTest, FilesOfFormatVersion1StillLoad) {
  struct Golden {
    const char* file;
    KvPolicy policy;
    bool all_indexes;
  };
  for (const Golden& g :
       {Golden{"v1_clusterkv_all_indexes", KvPolicy::kClusterKv, true},
        Golden{"v1_quest", KvPolicy::kQuest, false},
        Golden{"v1_streaming", KvPolicy::kStreaming, false}}) {
    SCOPED_TRACE(g.file);
    const std::string path = std::string(CLUSTERKV_TESTDATA_DIR) +
                             "/snapshots/" + g.file + ".ckvsnap";
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing " << path;
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    auto read = ReadSnapshotFile(path, Expect());
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->store.config.policy, g.policy);
    ClusterWorker worker;
    KvStoreConfig c = SmallConfig(g.policy);
    c.build_all_indexes = g.all_indexes;
    auto fresh = MakeStore(c, &worker);
    // Everything version 1 held is read: written again (current format) it
    // gives the bytes of the store built now.
    EXPECT_TRUE(SerializeSnapshot(*read, kModelFp) ==
                SerializeSnapshot(SnapshotOf(*fresh), kModelFp))
        << "a version 1 file reads differently";
    auto restored = RoundTrip(bytes, &worker);
    ASSERT_NE(restored, nullptr);
    EXPECT_EQ(restored->num_tokens(), fresh->num_tokens());
    for (int layer = 0; layer < kShape.n_layers; ++layer) {
      for (uint64_t q = 0; q < 3; ++q) {
        EXPECT_EQ(Selected(*restored, layer, q), Selected(*fresh, layer, q))
            << "layer " << layer << " query " << q;
      }
    }
  }
}

// A KV config and sampling defaults with every setting of the schema away
// from its default (and valid).
Snapshot EverySettingChanged(ClusterWorker* worker) {
  KvStoreConfig c = SmallConfig(KvPolicy::kQuest);
  c.budget = 20;
  c.sink_tokens = 3;
  c.tokens_per_cluster = 7;
  c.window = 12;
  c.kmeans_max_iters = 9;
  c.cache_steps = 3;
  c.cache_mode = CacheMode::kCopy;
  c.gqa_selection = GqaSelection::kPerKvHead;
  c.recent_tokens = 5;
  c.seed = 0xfeedbeefcafeULL;
  c.dense_layers = 2;
  c.quest_page_size = 8;
  c.kv_dtype = kernels::DType::kBF16;
  c.metric = ClusterMetric::kL2;
  c.async_clustering = false;
  c.build_all_indexes = true;
  Snapshot s = SnapshotOf(*MakeStore(c, worker));
  SamplingParams& p = s.meta.sampling;
  p.temperature = 0.7f;
  p.top_k = 12;
  p.top_p = 0.8f;
  p.seed = 0xabcdef0123456789ULL;
  p.max_tokens = 99;
  p.ignore_eos = true;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = -0.5f;
  p.presence_penalty = 0.25f;
  p.penalty_last_n = 32;
  p.logprobs = 3;
  p.logit_bias = {{2, -1.5f}, {7, 4.0f}};
  SnapshotConversation& chat = s.meta.conversation;
  chat.active = true;
  chat.messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", ""}};
  chat.text = "<|im_start|>system\nBe brief.<|im_end|>\n...";
  chat.reply_open = true;
  return s;
}

// Every KV setting of the schema, compared by walking its lists.
void ExpectSameKvSettings(const KvStoreConfig& a, const KvStoreConfig& b) {
#define CKV_EXPECT(name, ...) EXPECT_TRUE(a.name == b.name) << #name;
  CKV_KV_WIRE_NAMES(CKV_EXPECT)
  CKV_KV_ENGINE_NAMES(CKV_EXPECT)
  CKV_KV_WIRE_NUMBERS(CKV_EXPECT)
  CKV_KV_ENGINE_NUMBERS(CKV_EXPECT)
#undef CKV_EXPECT
}

// Every setting of the schema (common/settings_schema.h) survives the
// current format: the comparison walks the schema's own lists, so a new
// setting is covered by adding it there.
TEST(SnapshotTest, EverySettingRoundTrips) {
  ClusterWorker worker;
  const Snapshot s = EverySettingChanged(&worker);
  auto read = ParseSnapshot(SerializeSnapshot(s, kModelFp), Expect());
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameKvSettings(s.store.config, read->store.config);
  const SamplingParams &p = s.meta.sampling, &q = read->meta.sampling;
#define CKV_EXPECT(name, ...) EXPECT_EQ(p.name, q.name) << #name;
  CKV_SAMPLING_NUMBERS(CKV_EXPECT)
#undef CKV_EXPECT
  EXPECT_EQ(p.stop, q.stop);
  EXPECT_EQ(p.logit_bias, q.logit_bias);
  const SnapshotConversation &x = s.meta.conversation,
                             &y = read->meta.conversation;
  EXPECT_TRUE(y.active);
  EXPECT_EQ(x.messages, y.messages);
  EXPECT_EQ(x.text, y.text);
  EXPECT_TRUE(y.reply_open);
  auto restored = ClusteredKvStore::Restore(std::move(read->store), &worker);
  ASSERT_TRUE(restored.ok()) << restored.status();
}

// Appends the current format's section `tag` of `bytes` (from byte `at`,
// advanced past it) to `out`, with `body` in place of its body when given.
void CopySection(const std::string& bytes, size_t* at, std::string* out,
                 const std::string* body = nullptr) {
  uint64_t len = 0;
  std::memcpy(&len, bytes.data() + *at + 8, 8);
  if (body == nullptr) {
    out->append(bytes, *at, 16 + len);
  } else {
    out->append(bytes, *at, 8);
    const uint64_t n = body->size();
    out->append(reinterpret_cast<const char*>(&n), 8);
    out->append(*body);
  }
  *at += 16 + len;
}

template <class T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void PutStr(std::string* out, const std::string& v) {
  Put(out, static_cast<uint32_t>(v.size()));
  out->append(v);
}

// The snapshot of `s` in format version 1, written here field by field (its
// META and CONF as that version laid them out; EDGE and SEGM did not change).
std::string VersionOneBytes(const Snapshot& s) {
  const std::string now = SerializeSnapshot(s, kModelFp);
  const SnapshotMeta& m = s.meta;
  std::string meta;
  PutStr(&meta, m.session_id);
  PutStr(&meta, m.parent_id);
  PutStr(&meta, m.tenant);
  Put(&meta, m.idle_ttl_seconds);
  Put(&meta, m.sampling.temperature);
  Put(&meta, int32_t{m.sampling.top_k});
  Put(&meta, m.sampling.top_p);
  Put(&meta, m.sampling.seed);
  Put(&meta, int32_t{m.sampling.max_tokens});
  Put(&meta, static_cast<uint32_t>(m.sampling.stop.size()));
  for (const std::string& stop : m.sampling.stop) PutStr(&meta, stop);
  Put(&meta, static_cast<uint64_t>(m.last_logits.size()));
  for (float x : m.last_logits) Put(&meta, x);
  const KvStoreConfig& c = s.store.config;
  const KvShape& sh = s.store.shape;
  std::string conf;
  for (int32_t v : {sh.n_layers,
                    sh.n_heads,
                    sh.n_kv_heads,
                    sh.head_dim,
                    static_cast<int32_t>(c.policy),
                    c.budget,
                    c.sink_tokens,
                    c.tokens_per_cluster,
                    c.window,
                    c.kmeans_max_iters,
                    c.cache_steps,
                    static_cast<int32_t>(c.cache_mode),
                    static_cast<int32_t>(c.gqa_selection),
                    c.recent_tokens,
                    c.dense_layers,
                    c.quest_page_size,
                    static_cast<int32_t>(c.kv_dtype),
                    static_cast<int32_t>(c.metric),
                    static_cast<int32_t>(c.async_clustering),
                    static_cast<int32_t>(c.build_all_indexes)}) {
    Put(&conf, v);
  }
  Put(&conf, c.seed);
  Put(&conf, c.max_tokens);
  std::string payload;
  size_t at = kSnapshotHeaderBytes;
  CopySection(now, &at, &payload, &meta);
  CopySection(now, &at, &payload, &conf);
  payload.append(now, at, std::string::npos);  // EDGE, SEGM
  std::string out(kSnapshotHeaderBytes, '\0');
  std::memcpy(out.data(), "CKVSNAP", 8);
  const uint32_t version = 1, header = kSnapshotHeaderBytes;
  const uint64_t store_fp = snapshot_settings::StoreFingerprintV1(sh, c);
  const uint64_t payload_bytes = payload.size();
  const uint32_t payload_crc = Crc32c(0, payload.data(), payload.size());
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &header, 4);
  std::memcpy(out.data() + 16, &kModelFp, 8);
  std::memcpy(out.data() + 24, &store_fp, 8);
  std::memcpy(out.data() + 32, &payload_bytes, 8);
  std::memcpy(out.data() + 40, &payload_crc, 4);
  const uint32_t header_crc = Crc32c(0, out.data(), kSnapshotHeaderBytes - 4);
  std::memcpy(out.data() + 44, &header_crc, 4);
  return out + payload;
}

// A version 1 file built here loads: its settings, sampling fields and
// selections are those of the store it was written from; the sampling
// settings version 1 did not hold keep their defaults.
TEST(SnapshotTest, HandBuiltVersionOneFileLoads) {
  ClusterWorker worker;
  Snapshot s = EverySettingChanged(&worker);
  const std::string v1 = VersionOneBytes(s);
  uint32_t version = 0;
  std::memcpy(&version, v1.data() + 8, 4);
  ASSERT_EQ(version, 1u);
  auto read = ParseSnapshot(v1, Expect());
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameKvSettings(s.store.config, read->store.config);
  const SamplingParams& q = read->meta.sampling;
  EXPECT_EQ(q.temperature, s.meta.sampling.temperature);
  EXPECT_EQ(q.top_k, s.meta.sampling.top_k);
  EXPECT_EQ(q.seed, s.meta.sampling.seed);
  EXPECT_EQ(q.stop, s.meta.sampling.stop);
  EXPECT_EQ(q.min_p, SamplingParams{}.min_p);
  EXPECT_TRUE(q.logit_bias.empty());
  EXPECT_FALSE(read->meta.conversation.active);  // version 1 had none
  EXPECT_EQ(read->meta.last_logits, s.meta.last_logits);
  auto restored = ClusteredKvStore::Restore(std::move(read->store), &worker);
  ASSERT_TRUE(restored.ok()) << restored.status();
  auto original = ClusteredKvStore::Restore(std::move(s.store), &worker);
  ASSERT_TRUE(original.ok()) << original.status();
  for (int layer = 0; layer < kShape.n_layers; ++layer) {
    EXPECT_EQ(Selected(**restored, layer, 5), Selected(**original, layer, 5));
  }
  // A flipped config byte of version 1 is caught like any other.
  std::string bad = v1;
  bad[bad.size() / 2] ^= 1;
  EXPECT_EQ(ParseSnapshot(bad, Expect()).status().code(),
            absl::StatusCode::kDataLoss);
}

// A settings record is read by name: a missing setting keeps its default,
// an unknown one is FAILED_PRECONDITION, a wrong kind DATA_LOSS.
TEST(SnapshotSettingsTest, RecordIsReadByName) {
  auto record = [](const std::vector<std::pair<std::string, int64_t>>& ints) {
    std::string r;
    Put(&r, static_cast<uint32_t>(ints.size()));
    for (const auto& [name, v] : ints) {
      PutStr(&r, name);
      r.push_back('i');
      Put(&r, v);
    }
    return r;
  };
  KvStoreConfig c;
  ASSERT_TRUE(snapshot_settings::DecodeKv(record({{"budget", 77}}), &c).ok());
  EXPECT_EQ(c.budget, 77);
  EXPECT_EQ(c.window, KvStoreConfig{}.window);
  const absl::Status unknown =
      snapshot_settings::DecodeKv(record({{"future_knob", 1}}), &c);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kFailedPrecondition) << unknown;
  EXPECT_NE(unknown.message().find("future_knob"), std::string::npos);
  EXPECT_EQ(snapshot_settings::DecodeKv(record({{"policy", 1}}), &c).code(),
            absl::StatusCode::kDataLoss);  // a name, not a number
  EXPECT_EQ(
      snapshot_settings::DecodeKv(record({{"budget", int64_t{1} << 40}}), &c)
          .code(),
      absl::StatusCode::kDataLoss);  // does not fit an int
  EXPECT_EQ(
      snapshot_settings::DecodeKv(record({{"budget", 1}, {"budget", 2}}), &c)
          .code(),
      absl::StatusCode::kDataLoss);
}

TEST(SnapshotTest, EmptyAndSinkOnlyStores) {
  for (int n : {0, 3}) {
    ClusteredKvStore store(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr);
    if (n > 0) Feed(store, n, AppendKind::kPrompt, 5);
    auto restored =
        RoundTrip(SerializeSnapshot(SnapshotOf(store), kModelFp), nullptr);
    ASSERT_NE(restored, nullptr);
    EXPECT_EQ(restored->num_tokens(), n);
    Feed(*restored, 40, AppendKind::kPrompt, 6);  // still usable
    EXPECT_EQ(restored->num_tokens(), n + 40);
  }
}

// A small snapshot, for the exhaustive corruption tests.
std::string SmallSnapshot() {
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  c.sink_tokens = 2;
  c.window = 8;
  ClusteredKvStore store(KvShape{2, 2, 1, 4}, c, nullptr);
  std::mt19937_64 rng(3);
  for (int64_t n : {12, 3}) {
    EXPECT_TRUE(store.Reserve(n, AppendKind::kPrompt).ok());
    std::vector<float> kv(n * 4);
    for (float& x : kv) x = float(rng() % 100) / 10.0f;
    for (int l = 0; l < 2; ++l) store.Append(l, n, kv.data(), kv.data());
    store.Commit(n);
  }
  Snapshot s = SnapshotOf(store);
  return SerializeSnapshot(s, kModelFp);
}

TEST(SnapshotTest, EveryTruncationIsDataLoss) {
  const std::string bytes = SmallSnapshot();
  const SnapshotExpect e = Expect(KvShape{2, 2, 1, 4});
  ASSERT_TRUE(ParseSnapshot(bytes, e).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto s = ParseSnapshot(bytes.substr(0, n), e);
    ASSERT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << n;
    ASSERT_NE(s.status().message().find("truncated"), std::string::npos)
        << s.status();
  }
}

TEST(SnapshotTest, EveryFlippedByteIsRefused) {
  const std::string bytes = SmallSnapshot();
  const SnapshotExpect e = Expect(KvShape{2, 2, 1, 4});
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    auto s = ParseSnapshot(bad, e);
    ASSERT_FALSE(s.ok()) << "flip at " << i;
    ASSERT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
  }
  std::string payload_flip = bytes;
  payload_flip[bytes.size() - 1] ^= 1;
  EXPECT_EQ(ParseSnapshot(payload_flip, e).status().message(),
            "corrupt snapshot: payload checksum mismatch");
}

// Rewrites a header field and its checksum, as a writer with other
// parameters would have.
std::string PatchHeader(std::string bytes, size_t offset, uint64_t value,
                        size_t width) {
  std::memcpy(bytes.data() + offset, &value, width);
  const uint32_t crc = Crc32c(0, bytes.data(), kSnapshotHeaderBytes - 4);
  std::memcpy(bytes.data() + kSnapshotHeaderBytes - 4, &crc, 4);
  return bytes;
}

TEST(SnapshotTest, MismatchesAreFailedPrecondition) {
  const std::string bytes = SmallSnapshot();
  const SnapshotExpect e = Expect(KvShape{2, 2, 1, 4});
  auto expect_mismatch = [](const absl::StatusOr<Snapshot>& s,
                            const std::string& words) {
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition)
        << s.status();
    EXPECT_NE(s.status().message().find(words), std::string::npos)
        << s.status();
  };
  SnapshotExpect other_model = e;
  other_model.model_fingerprint = kModelFp + 1;
  expect_mismatch(ParseSnapshot(bytes, other_model), "another model file");
  SnapshotExpect other_shape = e;
  other_shape.shape.head_dim = 8;
  expect_mismatch(ParseSnapshot(bytes, other_shape), "KV shape");
  // Store fingerprint at byte 24, version at byte 8.
  expect_mismatch(ParseSnapshot(PatchHeader(bytes, 24, 42, 8), e),
                  "store parameters");
  expect_mismatch(ParseSnapshot(PatchHeader(bytes, 8, 3, 4), e),
                  "format version 3");
  expect_mismatch(ParseSnapshot(PatchHeader(bytes, 8, 0, 4), e),
                  "format version 0");
  SnapshotExpect small_limit = e;
  small_limit.max_tokens = 10;
  expect_mismatch(ParseSnapshot(bytes, small_limit), "max_session_tokens");
  SnapshotExpect other_vocab = e;
  other_vocab.vocab_size = 11;
  expect_mismatch(ParseSnapshot(bytes, other_vocab), "vocabulary");
}

// Parts that parse (valid checksums) but break the store's invariants.
TEST(SnapshotTest, InconsistentPartsAreRefusedByRestore) {
  ClusteredKvStore store(kShape, SmallConfig(KvPolicy::kClusterKv), nullptr);
  Feed(store, 60, AppendKind::kPrompt, 1);
  const std::string good = SerializeSnapshot(SnapshotOf(store), kModelFp);
  auto tamper = [&](const std::function<void(StoreParts&)>& edit) {
    auto parsed = ParseSnapshot(good, Expect());
    EXPECT_TRUE(parsed.ok());
    edit(parsed->store);
    const std::string bytes = SerializeSnapshot(*parsed, kModelFp);
    auto again = ParseSnapshot(bytes, Expect());
    if (!again.ok()) return again.status();
    return ClusteredKvStore::Restore(std::move(again->store), nullptr).status();
  };
  auto heads = [](StoreParts& p) -> HeadIndex& {
    return p.segments[0]->layer(1).heads[0];
  };
  const std::vector<std::pair<std::string, std::function<void(StoreParts&)>>>
      cases = {
          {"member", [&](StoreParts& p) { heads(p).members[3] = 1000; }},
          {"row in two clusters",
           [&](StoreParts& p) {  // still ascending within each cluster
             HeadIndex& h = heads(p);
             const int a =
                 h.offsets[1] - h.offsets[0] <= h.offsets[2] - h.offsets[1] ? 0
                                                                            : 1;
             const int b = 1 - a;
             std::copy_n(h.members.begin() + h.offsets[b],
                         h.offsets[a + 1] - h.offsets[a],
                         h.members.begin() + h.offsets[a]);
           }},
          {"offsets", [&](StoreParts& p) { heads(p).offsets[1] = -1; }},
          {"k", [&](StoreParts& p) { heads(p).k = 0; }},
          {"centroids", [&](StoreParts& p) { heads(p).centroids.pop_back(); }},
          {"index", [&](StoreParts& p) { p.segments[0]->layer(1).heads = {}; }},
          {"tokens", [&](StoreParts& p) { p.n_tokens += 1; }},
          {"tail", [&](StoreParts& p) { p.tail_rows = 1; }},
      };
  for (const auto& [name, edit] : cases) {
    const absl::Status s = tamper(edit);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_TRUE(absl::IsInvalidArgument(s) || absl::IsDataLoss(s))
        << name << ": " << s;
  }
  EXPECT_TRUE(tamper([](StoreParts&) {}).ok());
}

TEST(SnapshotTest, FileIsWrittenAtomically) {
  ClusterWorker worker;
  auto store = MakeStore(SmallConfig(KvPolicy::kClusterKv), &worker);
  const std::string path = testing::TempPath("snap.ckvsnap");
  auto bytes = WriteSnapshotFile(path, SnapshotOf(*store), kModelFp);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto read = ReadSnapshotFile(path, Expect());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->store.n_tokens, store->num_tokens());
  std::filesystem::resize_file(path, *bytes - 5);
  auto cut = ReadSnapshotFile(path, Expect());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find(path), std::string::npos);
  EXPECT_EQ(ReadSnapshotFile(path + ".nope", Expect()).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove(path);
}

// ------------------------------------------- with a model: greedy decoding

RandomModelSpec ModelSpec(uint64_t seed) {
  RandomModelSpec s;
  s.layers = 3;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = seed;
  return s;
}

// Feeds `tokens` (one segment when kPrompt); returns the last logits.
std::vector<float> Forward(Transformer& tf, ClusteredKvStore& store,
                           const std::vector<int32_t>& tokens,
                           AppendKind kind) {
  std::vector<float> logits;
  SequenceInput in =
      MakeInput(tokens, &store, LogitsMode::kLast, &logits, kind);
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  return logits;
}

// n greedy tokens from *logits (left as the logits after the last one).
std::vector<int32_t> Greedy(Transformer& tf, ClusteredKvStore& store,
                            std::vector<float>* logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(ArgMax(*logits));
    *logits = Forward(tf, store, {out.back()}, AppendKind::kGenerated);
  }
  return out;
}

TEST(SnapshotModelTest, GreedyContinuationIsIdentical) {
  auto model = LoadModel(testing::RandomModelPath("snap_a", ModelSpec(3)));
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  TransformerOptions t;
  t.threads = 2;
  Transformer tf(m.config, m.weights, t);
  ClusterWorker worker;
  KvStoreConfig c = SmallConfig(KvPolicy::kClusterKv);
  ClusteredKvStore store(KvShapeOf(m.config), c, &worker);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(3 + (i * 37) % 250);
  std::vector<float> logits = Forward(tf, store, prompt, AppendKind::kPrompt);
  Greedy(tf, store, &logits, 5);

  auto fp = ModelFingerprint(m.file->path(), m.file->tensors());
  ASSERT_TRUE(fp.ok()) << fp.status();
  Snapshot snap = SnapshotOf(store);
  snap.meta.last_logits = logits;
  const std::string bytes = SerializeSnapshot(snap, *fp);
  SnapshotExpect e;
  e.model_fingerprint = *fp;
  e.shape = KvShapeOf(m.config);
  e.vocab_size = m.config.vocab_size;
  e.max_tokens = 4096;
  auto parsed = ParseSnapshot(bytes, e);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto restored = ClusteredKvStore::Restore(std::move(parsed->store), &worker);
  ASSERT_TRUE(restored.ok()) << restored.status();

  // 40 tokens cross two window boundaries (new segments, new clusters).
  const std::vector<int32_t> a = Greedy(tf, store, &logits, 40);
  const std::vector<int32_t> b =
      Greedy(tf, **restored, &parsed->meta.last_logits, 40);
  EXPECT_EQ(a, b);
  EXPECT_EQ(logits, parsed->meta.last_logits);
  EXPECT_TRUE(SerializeSnapshot(SnapshotOf(**restored), *fp) ==
              SerializeSnapshot(SnapshotOf(store), *fp));

  // Another model file: another fingerprint, refused.
  auto other = LoadModel(testing::RandomModelPath("snap_b", ModelSpec(4)));
  ASSERT_TRUE(other.ok());
  auto other_fp =
      ModelFingerprint((*other)->file->path(), (*other)->file->tensors());
  ASSERT_TRUE(other_fp.ok());
  EXPECT_NE(*other_fp, *fp);
  e.model_fingerprint = *other_fp;
  EXPECT_EQ(ParseSnapshot(bytes, e).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ckv
