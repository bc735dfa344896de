// Helpers of the device backend tests (device_backend_test.cc,
// device_store_rows_test.cc, ...): tiny random models, the fake device and the
// CPU backend, one greedy session through a clustered store (Greedy) and
// the device-vs-CPU comparison of its trace (ExpectSameTrace), and an
// unrecorded decode (DecodeUnrecorded).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device/fake_runtime.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/device/device_backend.h"
#include "model/dense_kv_cache.h"
#include "model/kv/clustered_store.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/arch_specs.h"
#include "tests/model/test_util.h"

namespace ckv::device_test {

using kernels::device::FakeConfig;
using kernels::device::FakeRuntime;
using kernels::device::Schedule;

inline const std::vector<std::string> kArchNames = testing::EngineArchs();

inline RandomModelSpec SpecFor(const std::string& arch) {
  return testing::TinyArchSpec(arch, kernels::DType::kF16);
}

inline std::unique_ptr<Model> LoadArch(const std::string& arch) {
  auto m = LoadModel(testing::RandomModelPath("devbk_" + arch, SpecFor(arch)));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

// ClusterKV with a small budget, so that decode selection is sparse.
inline KvStoreConfig SparseConfig() {
  KvStoreConfig c;
  c.policy = KvPolicy::kClusterKv;
  c.budget = 16;
  c.sink_tokens = 4;
  c.tokens_per_cluster = 8;
  c.window = 16;  // tail segments close during decode
  c.dense_layers = 1;
  c.async_clustering = false;
  return c;
}

inline FakeConfig Fake(Schedule s, uint64_t seed = 1,
                       int64_t bytes = 64 << 20) {
  FakeConfig c;
  c.schedule = s;
  c.seed = seed;
  c.device_bytes = bytes;
  c.max_delay_us = 20;
  return c;
}

inline std::vector<int32_t> Tokens(int n, int vocab, int mul = 37,
                                   int add = 5) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * mul + add) % vocab;
  return t;
}

inline int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// max |a - b| / max |b| (inf when sizes differ or a value is not finite).
inline double RelDiff(const std::vector<float>& a,
                      const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double d = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return scale > 0.0 ? d / scale : d;
}

// What one greedy session produced.
struct Trace {
  std::vector<std::vector<float>> logits;  // prefill, then every step
  std::vector<int32_t> tokens;             // greedy choices
  // Per decode step: selected positions of every (layer, head), flattened.
  std::vector<std::vector<std::vector<int64_t>>> selected;
  CacheStats stats;
  absl::Status status;
  AttendCopyStats copies;    // a DeviceBackend's
  int64_t device_plans = 0;  // layers its planner planned
  int64_t list_ops = 0;      // its planner's row_lists ops
  int64_t cache_ops = 0;     // ... and cache_lists ops
  int64_t table_uploads = 0, table_evictions = 0, table_fallbacks = 0;
  int64_t kmeans_jobs = 0, kmeans_mapped_bytes = 0;  // on the device
  CacheRowsStats cache_rows;  // the block caches' device copies
  GraphStats graphs;          // the Transformer's regions on the device
  // Per decode step: times the device backend waited for its stream.
  std::vector<int64_t> step_syncs;
};

inline std::unique_ptr<Backend> Cpu() {
  return std::make_unique<CpuBackend>(BackendOptions{.threads = 1});
}

inline std::unique_ptr<Backend> Device(FakeRuntime& rt,
                                       DeviceBackendDebug debug = {},
                                       ResidencyOptions residency = {}) {
  return std::make_unique<DeviceBackend>(rt, "fake", "fake device", debug,
                                         residency);
}

// Segments only on the host (pinned): what crosses the link each step.
inline constexpr ResidencyOptions kOffload{KvResidency::kOffload, 0};

// Stage-1 ways of the device backend, for comparisons.
inline DeviceBackendDebug HeapArenaDebug() {
  DeviceBackendDebug d;
  d.heap_arena = true;
  return d;
}
inline DeviceBackendDebug HostSelectionDebug() {
  DeviceBackendDebug d;
  d.host_selection = true;
  return d;
}

inline std::vector<std::vector<int64_t>> Selected(const ClusteredKvStore& store,
                                                  const ModelConfig& c) {
  std::vector<std::vector<int64_t>> out;
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_heads; ++h) {
      out.push_back(store.selected_positions(l, h));
    }
  }
  return out;
}

// Prefill `prompt` tokens, then `steps` greedy decode steps, through a
// sparse clustered store (or a dense cache when `dense`). `chunk` > 0:
// the prompt goes in forward steps of that many tokens (each later one
// attends the segments the earlier ones closed, as a question after a
// document does); 0: one step.
inline Trace Greedy(const Model& m, std::unique_ptr<Backend> backend,
                    int prompt, int steps, bool dense = false,
                    const KvStoreConfig& config = SparseConfig(),
                    int chunk = 0) {
  const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
  // The backend's store env: segment rows in its arena (pinned on the
  // device) and, on the device, its planner.
  StoreEnv env = backend->store_env();
  Transformer tf(m.config, m.weights, {1, 64}, std::move(backend));
  ClusteredKvStore store(KvShapeOf(m.config), config, nullptr, std::move(env));
  DenseKvCache dense_cache(
      DenseCacheOptions(m.config, kernels::DType::kF16, 4096));
  KvCache* cache = dense ? static_cast<KvCache*>(&dense_cache) : &store;
  store.set_record_selection(true);
  Trace t;
  const std::vector<int32_t> p = Tokens(prompt, m.config.vocab_size);
  std::vector<float> logits;
  const int step = chunk > 0 ? chunk : prompt;
  for (int at = 0; at < prompt && t.status.ok(); at += step) {
    const auto part = absl::MakeConstSpan(p).subspan(at, step);
    SequenceInput in = MakeInput(part, cache, LogitsMode::kLast, &logits);
    t.status = tf.Forward(absl::MakeSpan(&in, 1));
  }
  t.logits.push_back(logits);
  for (int i = 0; i < steps && t.status.ok(); ++i) {
    const int32_t tok[1] = {Argmax(logits)};
    t.tokens.push_back(tok[0]);
    SequenceInput s = MakeInput(tok, cache, LogitsMode::kLast, &logits,
                                AppendKind::kGenerated);
    const int64_t syncs = device ? device->stream_syncs() : 0;
    t.status = tf.Forward(absl::MakeSpan(&s, 1));
    if (device) t.step_syncs.push_back(device->stream_syncs() - syncs);
    t.logits.push_back(logits);
    if (!dense) t.selected.push_back(Selected(store, m.config));
  }
  if (!dense) t.stats = store.cache_stats();
  if (device != nullptr) {
    t.copies = device->attend_copies();
    t.device_plans = device->planner().layers_planned();
    t.list_ops = device->planner().list_ops();
    t.cache_ops = device->planner().cache_ops();
    t.table_uploads = device->planner().table_uploads();
    t.table_evictions = device->planner().table_evictions();
    t.table_fallbacks = device->planner().table_fallbacks();
    t.kmeans_jobs = device->index_builder().device_jobs();
    t.kmeans_mapped_bytes = device->index_builder().mapped_key_bytes();
    t.cache_rows = device->cache_rows().stats();
    t.graphs = device->graph_stats();
  }
  return t;
}

inline void ExpectSameCacheStats(const CacheStats& a, const CacheStats& b) {
  EXPECT_EQ(a.lookups, b.lookups);
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.misses, b.misses);
  EXPECT_EQ(a.hit_tokens, b.hit_tokens);
  EXPECT_EQ(a.miss_tokens, b.miss_tokens);
  EXPECT_EQ(a.h2d_bytes, b.h2d_bytes);
}

// Device against CPU: logits within `tol` (relative), greedy tokens, and
// when `same_selection` the selections and cache statistics exactly.
inline void ExpectCloseTrace(const Trace& dev, const Trace& cpu,
                             const std::string& what, double tol,
                             bool same_selection) {
  ASSERT_TRUE(dev.status.ok()) << what << ": " << dev.status;
  ASSERT_TRUE(cpu.status.ok()) << what << ": " << cpu.status;
  ASSERT_EQ(dev.logits.size(), cpu.logits.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    const double d = RelDiff(dev.logits[i], cpu.logits[i]);
    worst = std::max(worst, d);
    EXPECT_LE(d, tol) << what << " step " << i;
  }
  EXPECT_EQ(dev.tokens, cpu.tokens) << what;
  if (same_selection) {
    EXPECT_TRUE(dev.selected == cpu.selected) << what;
    ExpectSameCacheStats(dev.stats, cpu.stats);
  }
  ::testing::Test::RecordProperty("max_rel_diff_" + what,
                                  std::to_string(worst));
  std::printf("%s: max relative logit difference %.3g\n", what.c_str(), worst);
}

// The same backend math: logits within 1e-5, everything else exact.
inline void ExpectSameTrace(const Trace& dev, const Trace& cpu,
                            const std::string& what) {
  ExpectCloseTrace(dev, cpu, what, 1e-5, true);
}

// A 40-token prompt and 12 greedy decode steps of a clustered store with
// config `c` and no recording: every step's logits and (on a device
// backend) how often it waited for the device, the planner's counts and
// the attention's copies.
struct Unrecorded {
  std::vector<std::vector<float>> logits;
  std::vector<int64_t> waits;
  absl::Status status;
  // The device planner's.
  int64_t deferred_calls = 0, list_ops = 0, layers_planned = 0;
  AttendCopyStats copies;
};
inline Unrecorded DecodeUnrecorded(const Model& m,
                                   std::unique_ptr<Backend> backend,
                                   const KvStoreConfig& c) {
  const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
  StoreEnv env = backend->store_env();
  Transformer tf(m.config, m.weights, {1, 64}, std::move(backend));
  ClusteredKvStore store(KvShapeOf(m.config), c, nullptr, std::move(env));
  Unrecorded r;
  std::vector<float> logits;
  const std::vector<int32_t> p = Tokens(40, m.config.vocab_size);
  SequenceInput in = MakeInput(p, &store, LogitsMode::kLast, &logits);
  r.status = tf.Forward(absl::MakeSpan(&in, 1));
  for (int i = 0; i < 12 && r.status.ok(); ++i) {
    const int32_t tok[1] = {Argmax(logits)};
    SequenceInput s = MakeInput(tok, &store, LogitsMode::kLast, &logits,
                                AppendKind::kGenerated);
    const int64_t before = device ? device->stream_syncs() : 0;
    r.status = tf.Forward(absl::MakeSpan(&s, 1));
    if (device) r.waits.push_back(device->stream_syncs() - before);
    r.logits.push_back(logits);
  }
  if (device != nullptr) {
    r.deferred_calls = device->planner().deferred_calls();
    r.list_ops = device->planner().list_ops();
    r.layers_planned = device->planner().layers_planned();
    r.copies = device->attend_copies();
  }
  return r;
}

}  // namespace ckv::device_test
