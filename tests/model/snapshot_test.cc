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

// Files written before the policies moved behind the registry
// (tests/model/testdata/snapshots/README.md) load, restore and select as a
// store built now; the writer still produces the same bytes.
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
    EXPECT_TRUE(SerializeSnapshot(SnapshotOf(*fresh), kModelFp) == bytes)
        << "the writer's bytes changed";
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
  expect_mismatch(ParseSnapshot(PatchHeader(bytes, 8, 2, 4), e),
                  "format version 2");
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
  SnapshotExpect e{*fp, KvShapeOf(m.config), m.config.vocab_size, 4096};
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
