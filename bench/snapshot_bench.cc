// Session snapshot size and time (model/kv/snapshot.h) for one session of a
// given KV shape: a prompt of --tokens random keys (clustered around a few
// directions, one Prefill segment, indexed by k-means as the server does)
// plus --generated decoded tokens, then write / read+parse / restore.
// Prints one JSON object. Defaults: the demo model's shape (4 layers, 8
// heads, 2 KV heads, head_dim 64) and the server's default KV settings.
//
//   snapshot_bench [--tokens 32768] [--generated 100] [--out DIR]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "model/kv/snapshot.h"

ABSL_FLAG(int64_t, tokens, 32768, "prompt tokens (one segment)");
ABSL_FLAG(int64_t, generated, 100, "decoded tokens after the prompt");
ABSL_FLAG(int, layers, 4, "layers");
ABSL_FLAG(int, heads, 8, "query heads");
ABSL_FLAG(int, kv_heads, 2, "KV heads");
ABSL_FLAG(int, head_dim, 64, "head dim");
ABSL_FLAG(std::string, out, "/tmp", "folder of the snapshot file");

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Feed(ckv::ClusteredKvStore& store, int64_t n, ckv::AppendKind kind,
          std::mt19937_64& rng) {
  const ckv::KvShape& s = store.shape();
  const int width = s.n_kv_heads * s.head_dim;
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(n * width), v(n * width);
  if (!store.Reserve(n, kind).ok()) std::abort();
  for (int l = 0; l < s.n_layers; ++l) {
    for (int64_t t = 0; t < n; ++t) {
      const int dir = static_cast<int>(rng() % 16);
      for (int i = 0; i < width; ++i) {
        k[t * width + i] = 0.3f * g(rng) + (i % s.head_dim == dir ? 3 : 0);
        v[t * width + i] = g(rng);
      }
    }
    store.Append(l, n, k.data(), v.data());
  }
  store.Commit(n);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const ckv::KvShape shape{
      absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_heads),
      absl::GetFlag(FLAGS_kv_heads), absl::GetFlag(FLAGS_head_dim)};
  ckv::KvStoreConfig config;  // the server's defaults (clusterkv, B = 1024)
  ckv::ClusterWorker worker;
  ckv::ClusteredKvStore store(shape, config, &worker);
  std::mt19937_64 rng(1);
  auto t0 = Clock::now();
  Feed(store, absl::GetFlag(FLAGS_tokens), ckv::AppendKind::kPrompt, rng);
  for (int64_t i = 0; i < absl::GetFlag(FLAGS_generated); ++i) {
    Feed(store, 1, ckv::AppendKind::kGenerated, rng);
  }
  for (int l = 0; l < shape.n_layers; ++l) store.WaitForIndex(l);
  const double fill_s = Since(t0);

  ckv::Snapshot snap;
  snap.meta.session_id = "s-bench";
  snap.meta.last_logits.assign(128256, 0.0f);  // a Llama-3 vocabulary
  snap.store = *store.Export();
  const std::string path = absl::GetFlag(FLAGS_out) + "/bench.ckvsnap";
  t0 = Clock::now();
  auto bytes = ckv::WriteSnapshotFile(path, snap, 1);
  const double write_s = Since(t0);
  if (!bytes.ok()) {
    std::fprintf(stderr, "%s\n", std::string(bytes.status().message()).c_str());
    return 1;
  }
  const ckv::SnapshotExpect e{.model_fingerprint = 1,
                              .shape = shape,
                              .vocab_size = 128256,
                              .max_tokens = config.max_tokens,
                              .arena = nullptr,
                              .verify_checksums = true};
  t0 = Clock::now();
  auto read = ckv::ReadSnapshotFile(path, e);
  const double read_s = Since(t0);
  if (!read.ok()) return 1;
  t0 = Clock::now();
  auto restored =
      ckv::ClusteredKvStore::Restore(std::move(read->store), &worker);
  const double restore_s = Since(t0);
  if (!restored.ok()) return 1;
  const ckv::KvMemoryStats m = store.memory();
  std::printf(
      "{\"tokens\": %lld, \"segments\": %zu, \"host_bytes\": %lld, "
      "\"snapshot_bytes\": %lld, \"write_s\": %.4f, \"read_parse_s\": %.4f, "
      "\"restore_s\": %.4f, \"fill_and_cluster_s\": %.2f}\n",
      static_cast<long long>(store.num_tokens()), store.segments().size(),
      static_cast<long long>(m.host_bytes), static_cast<long long>(*bytes),
      write_s, read_s, restore_s, fill_s);
  std::filesystem::remove(path);
  return 0;
}
