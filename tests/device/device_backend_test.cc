// The device backend (stage 1 plus device planning of clusterkv's sparse
// layers) on the fake device against the CPU backend: one Transformer, tiny
// random models of every architecture and the demo model. Logits within 1e-5
// relative, greedy tokens equal over 64 steps, equal attended positions and
// cache statistics of a sparse clustered store, the three schedules
// bit-identical, the ordering checker clean; planted bugs caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device/fake_runtime.h"
#include "model/backend/cpu/cpu_backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/backend/device/device_backend.h"
#include "model/dense_kv_cache.h"
#include "model/kv/clustered_store.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tests/device/greedy_trace.h"
#include "tests/model/arch_specs.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

class DeviceArchTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Arch, DeviceArchTest, ::testing::ValuesIn(kArchNames),
                         [](const auto& info) { return info.param; });

// 64 greedy steps over a sparse store: the attended positions differ from
// step to step, so equal selections show the host selection saw the same
// queries and keys.
TEST_P(DeviceArchTest, GreedyMatchesCpu) {
  auto m = LoadArch(GetParam());
  ASSERT_NE(m, nullptr);
  const Trace cpu = Greedy(*m, Cpu(), 48, 64);
  FakeRuntime rt(Fake(Schedule::kInline));
  const Trace dev = Greedy(*m, Device(rt), 48, 64);
  ExpectSameTrace(dev, cpu, GetParam());
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
  // Segment rows (selected clusters, whole segments) are resident on the
  // device (residency auto, within budget): nothing is copied per step;
  // the sparse layers were planned on the device.
  EXPECT_GT(dev.cache_rows.resident_bytes, 0) << GetParam();
  EXPECT_EQ(dev.copies.direct_bytes, 0) << GetParam();
  EXPECT_GT(dev.device_plans, 0) << GetParam();
  // Segment tables stay resident: uploaded once per (segment, layer), not
  // per step.
  EXPECT_GT(dev.table_uploads, 0) << GetParam();
  EXPECT_LT(dev.table_uploads * 4, dev.device_plans) << GetParam();
  EXPECT_EQ(dev.table_evictions + dev.table_fallbacks, 0) << GetParam();
  // The segments were clustered on the device, reading their pinned keys
  // in place.
  EXPECT_GT(dev.kmeans_jobs, 0) << GetParam();
  EXPECT_GT(dev.kmeans_mapped_bytes, 0) << GetParam();
  // Selection really was sparse somewhere.
  bool sparse = false;
  for (const auto& step : cpu.selected) {
    for (const auto& head : step) sparse |= !head.empty();
  }
  EXPECT_TRUE(sparse) << GetParam();
  EXPECT_GT(cpu.stats.lookups, 0) << GetParam();
}

// Inline, lazy and threaded (two seeds) give bit-identical logits.
TEST(DeviceBackendTest, SchedulesAreBitIdentical) {
  for (const std::string arch : {"llama", "gemma2"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    std::vector<Trace> traces;
    for (auto [schedule, seed] :
         {std::pair{Schedule::kInline, 1}, std::pair{Schedule::kLazy, 1},
          std::pair{Schedule::kThreaded, 1},
          std::pair{Schedule::kThreaded, 2}}) {
      FakeRuntime rt(Fake(schedule, seed));
      traces.push_back(Greedy(*m, Device(rt), 40, 12));
      ASSERT_TRUE(traces.back().status.ok()) << traces.back().status;
      EXPECT_TRUE(rt.OrderingStatus().ok())
          << ScheduleName(schedule) << ": " << rt.OrderingStatus();
      EXPECT_GT(rt.ops_run(), 0);
    }
    for (size_t i = 1; i < traces.size(); ++i) {
      ASSERT_EQ(traces[i].logits.size(), traces[0].logits.size());
      for (size_t s = 0; s < traces[0].logits.size(); ++s) {
        const auto& a = traces[i].logits[s];
        const auto& b = traces[0].logits[s];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << arch << " schedule " << i << " step " << s;
      }
      EXPECT_EQ(traces[i].tokens, traces[0].tokens);
    }
  }
}

// With residency offload (segments only on the host), segment rows in the
// backend's pinned arena are copied to the device straight from the
// segments; in heap memory (the arena a store gets when
// made without the backend's) they go through the staging buffer. Both give
// the same bits, under every schedule, with the ordering checker clean.
// Small runs (short segment heads: the dense layer's) go in one copy_runs
// op per part reading the mapped pinned rows; with that off
// (run_copy_max_bytes 0) each run is two DMA copies: the same bits in more
// device operations. The selected rows of sparse decode are read in place
// by the attention (row lists built on the device over the mapped pinned
// segment heads: listed spans), copied by neither.
TEST(DeviceBackendTest, PinnedSegmentRowsAreCopiedStraightFromTheSegments) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime heap_rt(Fake(Schedule::kInline));
  const Trace heap =
      Greedy(*m, Device(heap_rt, HeapArenaDebug(), kOffload), 48, 24);
  ASSERT_TRUE(heap.status.ok()) << heap.status;
  EXPECT_EQ(heap.copies.direct_bytes, 0);
  EXPECT_GT(heap.copies.staged_bytes, 0);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    FakeRuntime rt(Fake(s, 4));
    const Trace pinned = Greedy(*m, Device(rt, {}, kOffload), 48, 24);
    ASSERT_TRUE(pinned.status.ok()) << pinned.status;
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    ASSERT_EQ(pinned.logits.size(), heap.logits.size());
    for (size_t i = 0; i < heap.logits.size(); ++i) {
      EXPECT_EQ(pinned.logits[i], heap.logits[i])
          << ScheduleName(s) << " step " << i;
    }
    EXPECT_EQ(pinned.selected, heap.selected);
    EXPECT_GT(pinned.copies.direct_bytes, 0);
    EXPECT_GT(pinned.copies.run_ops, 0);
    EXPECT_GT(pinned.copies.run_bytes, 0);
    const int64_t ops = rt.ops_run();
    DeviceBackendDebug dma;
    dma.run_copy_max_bytes = 0;
    FakeRuntime dma_rt(Fake(s, 4));
    const Trace per_run = Greedy(*m, Device(dma_rt, dma, kOffload), 48, 24);
    ASSERT_TRUE(per_run.status.ok()) << per_run.status;
    EXPECT_TRUE(per_run.logits == pinned.logits) << ScheduleName(s);
    // No device gather: runs by DMA.
    EXPECT_EQ(per_run.copies.run_ops, 0);
    EXPECT_GT(pinned.copies.listed_spans, 0);
    EXPECT_EQ(per_run.copies.listed_spans, pinned.copies.listed_spans);
    EXPECT_GT(per_run.copies.direct_copies,
              pinned.copies.direct_copies + pinned.copies.run_ops);
    EXPECT_LT(ops, dma_rt.ops_run());
    std::printf(
        "%s: staged %lld bytes, direct %lld bytes (%lld in %lld copy_runs "
        "ops, the rest in %lld DMA copies; a DMA copy per run: %lld copies); "
        "device operations %lld vs %lld (heap arena: staged %lld)\n",
        ScheduleName(s), static_cast<long long>(pinned.copies.staged_bytes),
        static_cast<long long>(pinned.copies.direct_bytes),
        static_cast<long long>(pinned.copies.run_bytes),
        static_cast<long long>(pinned.copies.run_ops),
        static_cast<long long>(pinned.copies.direct_copies),
        static_cast<long long>(per_run.copies.direct_copies),
        static_cast<long long>(ops), static_cast<long long>(dma_rt.ops_run()),
        static_cast<long long>(heap.copies.staged_bytes));
    // The rows that no longer pass through staging.
    EXPECT_LT(pinned.copies.staged_bytes + pinned.copies.direct_bytes / 2,
              heap.copies.staged_bytes)
        << ScheduleName(s);
  }
}

// The device planner (DevicePlanner: ScoreClustersOp + SelectBlocksOp on
// the fake) gives the stores the plans their clusterkv policy gives on the
// host, in both GQA modes and with recent rows: equal attended positions
// per (step, layer, head), equal cache statistics, bit-equal logits. A
// planted off-by-one budget on the device is caught by the same comparison.
TEST(DeviceBackendTest, DevicePlansEqualTheHostPolicy) {
  for (const std::string arch : {"llama", "qwen3"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    for (auto [gqa, recent] : {std::pair{GqaSelection::kPerQueryHead, 0},
                               std::pair{GqaSelection::kPerKvHead, 0},
                               std::pair{GqaSelection::kPerQueryHead, 5},
                               std::pair{GqaSelection::kPerKvHead, 5}}) {
      KvStoreConfig c = SparseConfig();
      c.gqa_selection = gqa;
      c.recent_tokens = recent;
      const std::string what =
          arch +
          (gqa == GqaSelection::kPerKvHead ? " per_kv_head"
                                           : " per_query_head") +
          " recent " + std::to_string(recent);
      FakeRuntime host_rt(Fake(Schedule::kInline));
      const Trace host =
          Greedy(*m, Device(host_rt, HostSelectionDebug()), 48, 32, false, c);
      EXPECT_EQ(host.device_plans, 0) << what;
      FakeRuntime rt(Fake(Schedule::kThreaded, 6));
      const Trace device = Greedy(*m, Device(rt), 48, 32, false, c);
      ExpectSameTrace(device, host, what);
      EXPECT_GT(device.device_plans, 0) << what;
      // Row lists on the device, recent pages included.
      EXPECT_GT(device.list_ops, 0) << what;
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      for (size_t i = 0; i < host.logits.size(); ++i) {
        EXPECT_EQ(device.logits[i], host.logits[i]) << what << " step " << i;
      }
    }
  }
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime host_rt(Fake(Schedule::kInline)), bad_rt(Fake(Schedule::kInline));
  const Trace host = Greedy(*m, Device(host_rt, HostSelectionDebug()), 48, 16);
  DeviceBackendDebug planted;
  planted.planner.budget_one_short = true;
  const Trace bad = Greedy(*m, Device(bad_rt, planted), 48, 16);
  EXPECT_GT(bad.device_plans, 0);
  EXPECT_FALSE(bad.selected == host.selected)
      << "a budget one short on the device went unnoticed";
}

// The planner reads the queries from the backend's q rows on the device,
// on its own stream: it must wait for the event the backend records after
// them. Without the wait the ordering checker reports the race.
TEST(DeviceBackendTest, PlantedMissingQueryWaitIsCaught) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  DeviceBackendDebug planted;
  planted.planner.skip_query_wait = true;
  for (Schedule s : {Schedule::kInline, Schedule::kThreaded}) {
    FakeRuntime rt(Fake(s, 4));
    const Trace bad = Greedy(*m, Device(rt, planted), 48, 4);
    EXPECT_GT(bad.device_plans, 0);
    const absl::Status order = rt.OrderingStatus();
    EXPECT_FALSE(order.ok()) << ScheduleName(s);
    EXPECT_NE(order.message().find("gather_queries"), absl::string_view::npos)
        << order;
  }
}

// A segment-table pool too small for every layer's segments at once:
// entries of earlier calls are evicted and uploaded again, a call whose own
// segments do not fit falls back to the store's policy; plans, selections
// and logits stay the host's.
TEST(DeviceBackendTest, SmallSegmentTablePoolEvictsAndFallsBack) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime host_rt(Fake(Schedule::kInline));
  const Trace host = Greedy(*m, Device(host_rt, HostSelectionDebug()), 48, 40);
  for (int64_t bytes : {int64_t{6} << 10, int64_t{3} << 10}) {
    DeviceBackendDebug small;
    small.table_bytes = bytes;
    FakeRuntime rt(Fake(Schedule::kLazy));
    const Trace dev = Greedy(*m, Device(rt, small), 48, 40);
    ExpectSameTrace(dev, host, "pool " + std::to_string(bytes));
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    std::printf(
        "pool %lld: %lld plans, %lld uploads, %lld evictions, %lld "
        "fallbacks\n",
        static_cast<long long>(bytes), static_cast<long long>(dev.device_plans),
        static_cast<long long>(dev.table_uploads),
        static_cast<long long>(dev.table_evictions),
        static_cast<long long>(dev.table_fallbacks));
    EXPECT_GT(dev.device_plans, 0);
    // 6 KiB holds one layer's segments (about 2 KiB each here) but not
    // every layer's; 3 KiB not even one layer's once it has two segments.
    if (bytes == (int64_t{6} << 10)) {
      EXPECT_GT(dev.table_evictions, 0);
    } else {
      EXPECT_GT(dev.table_fallbacks, 0);
    }
  }
}

// The host waiting for the k-means results through the event is what
// orders its reads after the device's copy: without the wait the ordering
// checker reports the race under every schedule (and the lazy schedule
// hands the host poisoned results, which the builder refuses, solving the
// jobs on the host and failing the backend).
TEST(DeviceBackendTest, MissingEventWaitBeforeKMeansResultsIsCaught) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy}) {
    DeviceBackendDebug planted;
    planted.index_builder.skip_event_wait = true;
    FakeRuntime rt(Fake(s));
    const Trace t = Greedy(*m, Device(rt, planted), 48, 4);
    EXPECT_GT(rt.race_count(), 0) << ScheduleName(s);
    if (s == Schedule::kLazy) {
      EXPECT_FALSE(t.status.ok());
    }
  }
}

// Clustering on the ClusterWorker's thread through the device builder
// (low-priority stream) while decode steps run on the compute stream; a
// snapshot export taken while jobs may still run waits for them and holds
// the CPU's clusters bit for bit.
TEST(DeviceBackendTest, AsyncDeviceKMeansAndExportEqualTheCpu) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  auto run = [&](std::unique_ptr<Backend> backend, StoreParts* parts) {
    ClusterWorker worker;
    KvStoreConfig c = SparseConfig();
    c.async_clustering = true;
    const StoreEnv env = backend->store_env();
    Transformer tf(m->config, m->weights, {1, 64}, std::move(backend));
    ClusteredKvStore store(KvShapeOf(m->config), c, &worker, env);
    std::vector<float> logits;
    const std::vector<int32_t> p = Tokens(64, m->config.vocab_size);
    SequenceInput in = MakeInput(p, &store, LogitsMode::kLast, &logits);
    absl::Status st = tf.Forward(absl::MakeSpan(&in, 1));
    std::vector<int32_t> tokens;
    for (int i = 0; i < 24 && st.ok(); ++i) {
      const int32_t tok[1] = {Argmax(logits)};
      tokens.push_back(tok[0]);
      SequenceInput s = MakeInput(tok, &store, LogitsMode::kLast, &logits,
                                  AppendKind::kGenerated);
      st = tf.Forward(absl::MakeSpan(&s, 1));
    }
    EXPECT_TRUE(st.ok()) << st;
    auto exported = store.Export();
    EXPECT_TRUE(exported.ok()) << exported.status();
    if (exported.ok()) *parts = *std::move(exported);
    return tokens;
  };
  // The runtime outlives the exported segments, whose rows are its pinned
  // memory (the backend does not own it here).
  FakeRuntime rt(Fake(Schedule::kThreaded, 9));
  StoreParts cpu_parts, dev_parts;
  const std::vector<int32_t> cpu_tokens = run(Cpu(), &cpu_parts);
  auto device = std::make_unique<DeviceBackend>(rt, "fake", "fake device");
  const std::vector<int32_t> dev_tokens = run(std::move(device), &dev_parts);
  EXPECT_EQ(dev_tokens, cpu_tokens);
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
  ASSERT_EQ(dev_parts.segments.size(), cpu_parts.segments.size());
  ASSERT_GE(cpu_parts.segments.size(), 2u);
  for (size_t s = 0; s < cpu_parts.segments.size(); ++s) {
    for (int l = 1; l < m->config.n_layers; ++l) {
      const auto& a = cpu_parts.segments[s]->layer(l).heads;
      const auto& b = dev_parts.segments[s]->layer(l).heads;
      ASSERT_EQ(a.size(), b.size());
      for (size_t h = 0; h < a.size(); ++h) {
        EXPECT_EQ(a[h].centroids, b[h].centroids) << s << "/" << l << "/" << h;
        EXPECT_EQ(a[h].members, b[h].members) << s << "/" << l << "/" << h;
        EXPECT_EQ(a[h].offsets, b[h].offsets) << s << "/" << l << "/" << h;
      }
    }
  }
}

// The trained demo model (F16 or quantised weights as shipped).
TEST(DeviceBackendTest, DemoModelMatchesCpu) {
  const std::string path =
      std::string(CLUSTERKV_MODELS_DIR) + "/kjv-llama.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const Trace cpu = Greedy(**m, Cpu(), 64, 64);
  FakeRuntime rt(Fake(Schedule::kThreaded, 3));
  const Trace dev = Greedy(**m, Device(rt), 64, 64);
  ExpectSameTrace(dev, cpu, "kjv-llama");
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
}

// Logits of every sequence of `batch` runs, through one Transformer.
struct MultiRun {
  std::vector<std::vector<float>> logits;
  std::vector<CacheStats> stats;
  absl::Status status;
  int64_t layers_planned = 0, batches = 0;  // a DeviceBackend's planner
  DevicePlanner::OpCounts ops;
  AttendCopyStats copies;  // and its attention
};

// A prefill chunk inside a decode batch, then forks decoding together:
//  1. A prefills 40 tokens;
//  2. one step: A decodes a token while B prefills 24 (two parts);
//  3. A forks twice; A, both forks and B decode 6 steps in one batch.
MultiRun BatchScenario(const Model& m, std::unique_ptr<Backend> backend) {
  const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
  const StoreEnv env = backend->store_env();
  Transformer tf(m.config, m.weights, {1, 256}, std::move(backend));
  const int vocab = m.config.vocab_size;
  std::vector<std::unique_ptr<ClusteredKvStore>> stores;
  for (int i = 0; i < 2; ++i) {
    stores.push_back(std::make_unique<ClusteredKvStore>(
        KvShapeOf(m.config), SparseConfig(), nullptr, env));
  }
  MultiRun r;
  std::vector<float> la, lb;
  const auto pa = Tokens(40, vocab), pb = Tokens(24, vocab, 11, 3);
  SequenceInput a = MakeInput(pa, stores[0].get(), LogitsMode::kLast, &la);
  r.status = tf.Forward(absl::MakeSpan(&a, 1));
  if (!r.status.ok()) return r;
  const int32_t t0[1] = {Argmax(la)};
  std::vector<SequenceInput> step = {
      MakeInput(t0, stores[0].get(), LogitsMode::kLast, &la,
                AppendKind::kGenerated),
      MakeInput(pb, stores[1].get(), LogitsMode::kAll, &lb)};
  r.status = tf.Forward(absl::MakeSpan(step));
  r.logits = {la, lb};
  for (int i = 0; i < 2 && r.status.ok(); ++i) {
    auto fork = stores[0]->Fork();
    if (!fork.ok()) {
      r.status = fork.status();
      return r;
    }
    stores.push_back(*std::move(fork));
  }
  std::vector<std::vector<float>> out(stores.size());
  for (int s = 0; s < 6 && r.status.ok(); ++s) {
    std::vector<int32_t> toks(stores.size());
    std::vector<SequenceInput> batch;
    for (size_t i = 0; i < stores.size(); ++i) {
      toks[i] = (s * 7 + static_cast<int>(i) * 13 + 1) % vocab;
      batch.push_back(MakeInput(absl::MakeConstSpan(&toks[i], 1),
                                stores[i].get(), LogitsMode::kLast, &out[i],
                                AppendKind::kGenerated));
    }
    r.status = tf.Forward(absl::MakeSpan(batch));
    r.logits.insert(r.logits.end(), out.begin(), out.end());
  }
  for (const auto& st : stores) r.stats.push_back(st->cache_stats());
  if (device != nullptr) {
    r.layers_planned = device->planner().layers_planned();
    r.batches = device->planner().batches();
    r.ops = device->planner().op_counts();
    r.copies = device->attend_copies();
  }
  return r;
}

TEST(DeviceBackendTest, PrefillInDecodeBatchAndForks) {
  for (const std::string arch : {"llama", "gemma3"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    const MultiRun cpu = BatchScenario(*m, Cpu());
    FakeRuntime rt(Fake(Schedule::kThreaded, 5));
    const MultiRun dev = BatchScenario(*m, Device(rt));
    DeviceBackendDebug per_part;
    per_part.one_op_per_part = true;
    FakeRuntime rt_parts(Fake(Schedule::kThreaded, 5));
    const MultiRun parts = BatchScenario(*m, Device(rt_parts, per_part));
    ASSERT_TRUE(parts.status.ok()) << parts.status;
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    ASSERT_TRUE(dev.status.ok()) << dev.status;
    ASSERT_EQ(dev.logits.size(), cpu.logits.size());
    for (size_t i = 0; i < cpu.logits.size(); ++i) {
      EXPECT_LE(RelDiff(dev.logits[i], cpu.logits[i]), 1e-5)
          << arch << " output " << i;
    }
    ASSERT_EQ(dev.stats.size(), cpu.stats.size());
    for (size_t i = 0; i < cpu.stats.size(); ++i) {
      ExpectSameCacheStats(dev.stats[i], cpu.stats[i]);
    }
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    // The decoding stores of a step are planned in one batch per layer:
    // the four-store steps plan four layers per upload and sync (the step
    // with B's prefill one).
    std::printf("%s: %lld layers planned in %lld batches\n", arch.c_str(),
                static_cast<long long>(dev.layers_planned),
                static_cast<long long>(dev.batches));
    EXPECT_GT(dev.batches, 0) << arch;
    EXPECT_GT(dev.layers_planned, 3 * dev.batches) << arch;
    // Two ops per batch: one scores every (store, KV head, segment), one
    // selects for every planned query.
    std::printf("%s: %lld score and %lld select problems in %lld + %lld ops\n",
                arch.c_str(), static_cast<long long>(dev.ops.score_items),
                static_cast<long long>(dev.ops.select_items),
                static_cast<long long>(dev.ops.score_ops),
                static_cast<long long>(dev.ops.select_ops));
    EXPECT_EQ(dev.ops.score_ops, dev.batches) << arch;
    EXPECT_EQ(dev.ops.select_ops, dev.batches) << arch;
    // Every query read on the device (no host q in the planner's upload).
    EXPECT_EQ(dev.ops.gather_ops, dev.batches) << arch;
    EXPECT_EQ(dev.ops.gather_items, dev.layers_planned) << arch;
    EXPECT_GT(dev.ops.score_items, 3 * dev.batches) << arch;
    EXPECT_GT(dev.ops.select_items, 3 * dev.batches) << arch;
    // And attended in one op per layer and step: the prefill (1 part), the
    // mixed step (2 parts), six steps of four decoding stores (4 parts).
    const int64_t layers = m->config.n_layers;
    EXPECT_EQ(dev.copies.attention_ops, (1 + 1 + 6) * layers) << arch;
    EXPECT_EQ(dev.copies.batched_parts, (1 + 2 + 6 * 4) * layers) << arch;
    // The same outputs as one op per part, bit for bit (the host form
    // attends each part's rows as one call either way), in fewer ops.
    EXPECT_EQ(parts.copies.attention_ops, parts.copies.batched_parts) << arch;
    EXPECT_EQ(parts.logits, dev.logits) << arch;
    std::printf(
        "%s: %lld attention ops for %lld parts; runtime ops %lld "
        "(one op per part: %lld)\n",
        arch.c_str(), static_cast<long long>(dev.copies.attention_ops),
        static_cast<long long>(dev.copies.batched_parts),
        static_cast<long long>(rt.ops_run()),
        static_cast<long long>(rt_parts.ops_run()));
    EXPECT_LT(rt.ops_run(), rt_parts.ops_run()) << arch;
    EXPECT_TRUE(rt_parts.OrderingStatus().ok()) << rt_parts.OrderingStatus();
  }
}

// ---- MakeBackend(kFake) and errors ------------------------------------------

TEST(DeviceBackendTest, MakeBackendFake) {
  EXPECT_TRUE(CheckBackendBuilt(BackendKind::kFake).ok());
  auto kind = ParseBackendFlag("fake");
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(*kind, BackendKind::kFake);
  BackendOptions o;
  o.fake_schedule = Schedule::kLazy;
  o.fake_device_bytes = int64_t{96} << 20;
  o.fake_seed = 7;
  auto backend = MakeBackend(BackendKind::kFake, o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const BackendInfo info = (*backend)->info();
  EXPECT_EQ(info.name, "fake");
  EXPECT_EQ(info.device, "fake device (schedule lazy, seed 7)");
  EXPECT_EQ(info.device_memory_bytes, int64_t{96} << 20);
  // And it runs the model: the same answer as the CPU backend.
  auto m = LoadArch("qwen2");
  ASSERT_NE(m, nullptr);
  const Trace dev = Greedy(*m, *std::move(backend), 20, 4);
  const Trace cpu = Greedy(*m, Cpu(), 20, 4);
  ExpectSameTrace(dev, cpu, "make_backend");
  o.fake_device_bytes = 0;
  EXPECT_EQ(MakeBackend(BackendKind::kFake, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --backend cuda and auto on this machine: without a usable CUDA device
// (or without the CUDA backend) cuda is refused naming the device or the
// build, and auto falls back to the CPU saying why (info().selection).
TEST(DeviceBackendTest, CudaWithoutADeviceIsRefusedAndAutoFallsBack) {
  if (CudaDeviceStatus().ok()) {
    GTEST_SKIP() << "a CUDA device is usable here (the device check runs it)";
  }
  auto cuda = MakeBackend(BackendKind::kCuda, BackendOptions{});
  ASSERT_FALSE(cuda.ok());
  if (CudaBackendBuilt()) {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("CUDA device"),
              absl::string_view::npos)
        << cuda.status();
  } else {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_NE(cuda.status().message().find("--backend cuda"),
            absl::string_view::npos)
      << cuda.status();
  auto automatic = MakeBackend(BackendKind::kAuto, BackendOptions{});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  const BackendInfo info = (*automatic)->info();
  EXPECT_EQ(info.name, "cpu");
  EXPECT_NE(info.selection.find("auto: CPU (no CUDA backend: "),
            std::string::npos)
      << info.selection;
  EXPECT_NE(info.selection.find(std::string(CudaDeviceStatus().message())),
            std::string::npos)
      << info.selection;
  // A named backend carries no selection note.
  auto cpu = MakeBackend(BackendKind::kCpu, BackendOptions{});
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE((*cpu)->info().selection.empty());
}

// The first error stops the device work; Forward returns it; the logits
// are NaN; nothing aborts.
void ExpectFailed(const Trace& t, absl::StatusCode code,
                  const std::string& text) {
  EXPECT_EQ(t.status.code(), code) << t.status;
  EXPECT_NE(t.status.message().find(text), absl::string_view::npos) << t.status;
  ASSERT_FALSE(t.logits.empty());
  ASSERT_FALSE(t.logits[0].empty());
  EXPECT_TRUE(std::isnan(t.logits[0][0]));
}

TEST(DeviceBackendTest, OutOfDeviceMemoryIsAnError) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime rt(Fake(Schedule::kInline, 1, 64 << 10));
  ExpectFailed(Greedy(*m, Device(rt), 16, 2),
               absl::StatusCode::kResourceExhausted, "");
}

// Planted: the host reads q/k/v and logits staging before the stream is
// synchronised. The ordering checker reports it under every schedule; the
// lazy one also hands the host poisoned bytes.
TEST(DeviceBackendTest, PlantedMissingSyncIsARace) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const Trace cpu = Greedy(*m, Cpu(), 16, 2, /*dense=*/true);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy}) {
    FakeRuntime rt(Fake(s));
    DeviceBackendDebug bug;
    bug.skip_sync_before_host_read = true;
    const Trace t = Greedy(*m, Device(rt, bug), 16, 2, /*dense=*/true);
    EXPECT_EQ(rt.OrderingStatus().code(), absl::StatusCode::kFailedPrecondition)
        << ScheduleName(s);
    EXPECT_GT(rt.race_count(), 0);
    if (s == Schedule::kLazy) {
      EXPECT_FALSE(RelDiff(t.logits[0], cpu.logits[0]) <= 1e-5);
    }
  }
}

TEST(DeviceBackendTest, PlantedPageableCopyIsRefused) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime rt(Fake(Schedule::kInline));
  DeviceBackendDebug bug;
  bug.pageable_staging = true;
  ExpectFailed(Greedy(*m, Device(rt, bug), 16, 2),
               absl::StatusCode::kInvalidArgument, "pageable");
}

TEST(DeviceBackendTest, PlantedHostReadOfDevicePointerIsRefused) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  FakeRuntime rt(Fake(Schedule::kInline));
  DeviceBackendDebug bug;
  bug.host_reads_device_ptr = true;
  ExpectFailed(Greedy(*m, Device(rt, bug), 16, 2),
               absl::StatusCode::kInvalidArgument, "device address");
}

}  // namespace
}  // namespace ckv
