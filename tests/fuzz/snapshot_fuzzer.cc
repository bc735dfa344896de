// libFuzzer target for session snapshots (model/kv/snapshot.h): any input
// must either parse or fail with DATA_LOSS / FAILED_PRECONDITION and a
// message. Each input is read twice: as a whole file (checksums verified),
// and with its header made valid and checksums off, so that mutations reach
// the section parser. What parses is restored (INVALID_ARGUMENT or a store);
// a restored store attends every layer (the reference attention reads every
// selected row, so ASan sees a bad index) and takes a few more tokens.
//
// Seeds: when CLUSTERKV_FUZZ_SEED_DIR names a folder, LLVMFuzzerInitialize
// writes small valid snapshots there (scripts/fuzz.sh passes the same
// folder as the corpus).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/kv/snapshot.h"

namespace {

using ckv::AppendKind;
using ckv::ClusteredKvStore;
using ckv::KvPolicy;
using ckv::KvShape;
using ckv::KvStoreConfig;
using ckv::SnapshotExpect;

const KvShape kShape{/*n_layers=*/2, /*n_heads=*/2, /*n_kv_heads=*/1,
                     /*head_dim=*/4};
constexpr uint64_t kModelFp = 0x5eed;
constexpr int64_t kMaxTokens = 512;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "snapshot_fuzzer invariant violated: %s\n", what);
    std::abort();
  }
}

SnapshotExpect Expect(bool verify) {
  SnapshotExpect e;
  e.model_fingerprint = kModelFp;
  e.shape = kShape;
  e.vocab_size = 8;
  e.max_tokens = kMaxTokens;
  e.verify_checksums = verify;
  return e;
}

// n tokens of deterministic K,V (all heads) appended as one call.
void Feed(ClusteredKvStore& store, int64_t n, AppendKind kind, int salt) {
  if (!store.Reserve(n, kind).ok()) return;
  std::vector<float> kv(n * kShape.n_kv_heads * kShape.head_dim);
  for (size_t i = 0; i < kv.size(); ++i) {
    kv[i] = static_cast<float>((i * 7 + salt * 13) % 11) - 5.0f;
  }
  for (int l = 0; l < kShape.n_layers; ++l) {
    store.Append(l, n, kv.data(), kv.data());
  }
  store.Commit(n);
}

// One decode-step attention over every layer.
void AttendAll(ClusteredKvStore& store) {
  const std::vector<float> q(kShape.n_heads * kShape.head_dim, 0.25f);
  std::vector<float> out(q.size());
  const int64_t pos = store.num_tokens();
  for (int l = 0; l < kShape.n_layers; ++l) {
    ckv::AttendSet set;
    store.Select(l, ckv::LayerQuery{q.data(), &pos, 1}, &set);
    ckv::kernels::cpu::AttentionArgs a;
    a.q = q.data();
    a.q_pos = &pos;
    a.n_q = 1;
    a.n_heads = kShape.n_heads;
    a.head_dim = kShape.head_dim;
    a.scale = 0.5f;
    a.kv = set.per_head.data();
    a.out = out.data();
    ckv::kernels::ref::Attention(a);
  }
}

void Exercise(ckv::Snapshot s) {
  const KvStoreConfig c = s.store.config;
  auto store = ClusteredKvStore::Restore(std::move(s.store), nullptr);
  if (!store.ok()) {
    Check(absl::IsInvalidArgument(store.status()), "restore error code");
    return;
  }
  AttendAll(**store);
  // More tokens close segments and cluster them (inline): only where the
  // fuzzed config keeps that cheap.
  if (c.kmeans_max_iters <= 32 && c.window <= 64 && c.sink_tokens <= 64) {
    for (int i = 0; i < 8; ++i) Feed(**store, 1, AppendKind::kGenerated, i);
    AttendAll(**store);
  }
}

void Parse(const std::string& bytes, bool verify) {
  auto s = ckv::ParseSnapshot(bytes, Expect(verify));
  if (s.ok()) {
    Exercise(*std::move(s));
    return;
  }
  const absl::StatusCode code = s.status().code();
  Check(code == absl::StatusCode::kDataLoss ||
            code == absl::StatusCode::kFailedPrecondition,
        "error code is DATA_LOSS or FAILED_PRECONDITION");
  Check(!s.status().message().empty(), "error message");
}

// The input with magic, version, model fingerprint and payload size set.
std::string FixHeader(const uint8_t* data, size_t size) {
  std::string b(reinterpret_cast<const char*>(data), size);
  if (b.size() < ckv::kSnapshotHeaderBytes) {
    b.resize(ckv::kSnapshotHeaderBytes, '\0');
  }
  const uint32_t version = ckv::kSnapshotVersion;
  const uint32_t header = ckv::kSnapshotHeaderBytes;
  const uint64_t payload = b.size() - ckv::kSnapshotHeaderBytes;
  std::memcpy(b.data(), "CKVSNAP", 8);
  std::memcpy(b.data() + 8, &version, 4);
  std::memcpy(b.data() + 12, &header, 4);
  std::memcpy(b.data() + 16, &kModelFp, 8);
  std::memcpy(b.data() + 32, &payload, 8);
  return b;
}

std::vector<std::string> Seeds() {
  std::vector<std::string> out;
  for (KvPolicy p :
       {KvPolicy::kClusterKv, KvPolicy::kQuest, KvPolicy::kStreaming}) {
    KvStoreConfig c;
    c.policy = p;
    c.build_all_indexes = p == KvPolicy::kStreaming;
    c.sink_tokens = 2;
    c.window = 6;
    c.tokens_per_cluster = 4;
    c.quest_page_size = 4;
    c.dense_layers = 1;
    c.max_tokens = kMaxTokens;
    ClusteredKvStore store(kShape, c, nullptr);
    Feed(store, 11, AppendKind::kPrompt, 1);
    for (int i = 0; i < 9; ++i) Feed(store, 1, AppendKind::kGenerated, 2 + i);
    ckv::Snapshot s;
    s.meta.session_id = "s-seed";
    s.meta.tenant = "t";
    s.meta.sampling.stop = {"x"};
    s.meta.last_logits.assign(8, 0.5f);
    s.store = *store.Export();
    out.push_back(ckv::SerializeSnapshot(s, kModelFp));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("CLUSTERKV_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  const auto seeds = Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path =
        std::string(dir) + "/snapshot_seed_" + std::to_string(i) + ".ckvsnap";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) continue;  // the fuzzer still runs, just unseeded
    std::fwrite(seeds[i].data(), 1, seeds[i].size(), f);
    std::fclose(f);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Parse(std::string(reinterpret_cast<const char*>(data), size), true);
  Parse(FixHeader(data, size), false);
  return 0;
}
