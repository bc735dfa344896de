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
#include "model/backend/device/device_backend.h"
#include "model/dense_kv_cache.h"
#include "model/kv/clustered_store.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/arch_specs.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

using kernels::device::FakeConfig;
using kernels::device::FakeRuntime;
using kernels::device::Schedule;

const std::vector<std::string> kArchNames = testing::EngineArchs();

RandomModelSpec SpecFor(const std::string& arch) {
  return testing::TinyArchSpec(arch, kernels::DType::kF16);
}

std::unique_ptr<Model> LoadArch(const std::string& arch) {
  auto m = LoadModel(testing::RandomModelPath("devbk_" + arch, SpecFor(arch)));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

// ClusterKV with a small budget, so that decode selection is sparse.
KvStoreConfig SparseConfig() {
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

FakeConfig Fake(Schedule s, uint64_t seed = 1, int64_t bytes = 64 << 20) {
  FakeConfig c;
  c.schedule = s;
  c.seed = seed;
  c.device_bytes = bytes;
  c.max_delay_us = 20;
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int mul = 37, int add = 5) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * mul + add) % vocab;
  return t;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// max |a - b| / max |b| (inf when sizes differ or a value is not finite).
double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
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
  int64_t table_uploads = 0, table_evictions = 0, table_fallbacks = 0;
  int64_t kmeans_jobs = 0, kmeans_mapped_bytes = 0;  // on the device
  CacheRowsStats cache_rows;  // the block caches' device copies
};

std::unique_ptr<Backend> Cpu() {
  return std::make_unique<CpuBackend>(BackendOptions{.threads = 1});
}

std::unique_ptr<Backend> Device(FakeRuntime& rt, DeviceBackendDebug debug = {},
                                ResidencyOptions residency = {}) {
  return std::make_unique<DeviceBackend>(rt, "fake", "fake device", debug,
                                         residency);
}

// Segments only on the host (pinned): what crosses the link each step.
constexpr ResidencyOptions kOffload{KvResidency::kOffload, 0};

// Stage-1 ways of the device backend, for comparisons.
DeviceBackendDebug HeapArenaDebug() {
  DeviceBackendDebug d;
  d.heap_arena = true;
  return d;
}
DeviceBackendDebug HostSelectionDebug() {
  DeviceBackendDebug d;
  d.host_selection = true;
  return d;
}

std::vector<std::vector<int64_t>> Selected(const ClusteredKvStore& store,
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
// sparse clustered store (or a dense cache when `dense`).
Trace Greedy(const Model& m, std::unique_ptr<Backend> backend, int prompt,
             int steps, bool dense = false,
             const KvStoreConfig& config = SparseConfig()) {
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
  SequenceInput in = MakeInput(p, cache, LogitsMode::kLast, &logits);
  t.status = tf.Forward(absl::MakeSpan(&in, 1));
  t.logits.push_back(logits);
  for (int i = 0; i < steps && t.status.ok(); ++i) {
    const int32_t tok[1] = {Argmax(logits)};
    t.tokens.push_back(tok[0]);
    SequenceInput s = MakeInput(tok, cache, LogitsMode::kLast, &logits,
                                AppendKind::kGenerated);
    t.status = tf.Forward(absl::MakeSpan(&s, 1));
    t.logits.push_back(logits);
    if (!dense) t.selected.push_back(Selected(store, m.config));
  }
  if (!dense) t.stats = store.cache_stats();
  if (device != nullptr) {
    t.copies = device->attend_copies();
    t.device_plans = device->planner().layers_planned();
    t.table_uploads = device->planner().table_uploads();
    t.table_evictions = device->planner().table_evictions();
    t.table_fallbacks = device->planner().table_fallbacks();
    t.kmeans_jobs = device->index_builder().device_jobs();
    t.kmeans_mapped_bytes = device->index_builder().mapped_key_bytes();
    t.cache_rows = device->cache_rows().stats();
  }
  return t;
}

void ExpectSameCacheStats(const CacheStats& a, const CacheStats& b) {
  EXPECT_EQ(a.lookups, b.lookups);
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.misses, b.misses);
  EXPECT_EQ(a.hit_tokens, b.hit_tokens);
  EXPECT_EQ(a.miss_tokens, b.miss_tokens);
  EXPECT_EQ(a.h2d_bytes, b.h2d_bytes);
}

// Device against CPU: logits, greedy tokens, selections, cache statistics.
void ExpectSameTrace(const Trace& dev, const Trace& cpu,
                     const std::string& what) {
  ASSERT_TRUE(dev.status.ok()) << what << ": " << dev.status;
  ASSERT_TRUE(cpu.status.ok()) << what << ": " << cpu.status;
  ASSERT_EQ(dev.logits.size(), cpu.logits.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    const double d = RelDiff(dev.logits[i], cpu.logits[i]);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-5) << what << " step " << i;
  }
  EXPECT_EQ(dev.tokens, cpu.tokens) << what;
  EXPECT_TRUE(dev.selected == cpu.selected) << what;
  ExpectSameCacheStats(dev.stats, cpu.stats);
  ::testing::Test::RecordProperty("max_rel_diff_" + what,
                                  std::to_string(worst));
  std::printf("%s: max relative logit difference %.3g\n", what.c_str(), worst);
}

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
    EXPECT_GT(pinned.copies.direct_copies, 0);
    std::printf(
        "%s: staged %lld bytes, direct %lld bytes in %lld copies "
        "(heap arena: staged %lld)\n",
        ScheduleName(s), static_cast<long long>(pinned.copies.staged_bytes),
        static_cast<long long>(pinned.copies.direct_bytes),
        static_cast<long long>(pinned.copies.direct_copies),
        static_cast<long long>(heap.copies.staged_bytes));
    // The rows that no longer pass through staging.
    EXPECT_LT(pinned.copies.staged_bytes + pinned.copies.direct_bytes / 2,
              heap.copies.staged_bytes)
        << ScheduleName(s);
  }
}

// Store rows stay in device memory: copy-mode block caches keep their
// blocks there (a block selected again within cache_steps steps is read in
// place, only misses cross the link), and the sinks and open tail are
// mirrored there (each appended row crosses once). The fill is exactly the
// caches' h2d_bytes plus the appended rows; the results equal the CPU
// backend's (copy mode there too) under every schedule with the ordering
// checker clean. The same runs with host store rows (stage 1: every
// attended row staged each step) move more bytes. Residency offload, so
// that segments stay on the host (SegmentsResidentOnTheDevice has the
// rest).
TEST(DeviceBackendTest, StoreRowsStayOnTheDevice) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const int prompt = 48, steps = 40;
  const int64_t appended = int64_t{prompt + steps} * m->config.n_layers *
                           m->config.n_kv_heads * m->config.head_dim * 2 * 2;
  for (const int r : {0, 1, 3}) {
    KvStoreConfig c = SparseConfig();
    c.cache_mode = CacheMode::kCopy;
    c.cache_steps = r;
    const std::string what = "cache_steps " + std::to_string(r);
    const Trace cpu = Greedy(*m, Cpu(), prompt, steps, false, c);
    DeviceBackendDebug host_rows;
    host_rows.host_cache_rows = true;
    FakeRuntime host_rt(Fake(Schedule::kInline));
    const Trace host =
        Greedy(*m, Device(host_rt, host_rows), prompt, steps, false, c);
    ExpectSameTrace(host, cpu, what + " host rows");
    EXPECT_EQ(host.copies.cached_rows, 0);
    EXPECT_EQ(host.cache_rows.fill_bytes, 0);
    const int64_t host_link =
        host.copies.staged_bytes + host.copies.direct_bytes;
    for (Schedule s :
         {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
      FakeRuntime rt(Fake(s, 7));
      const Trace dev =
          Greedy(*m, Device(rt, {}, kOffload), prompt, steps, false, c);
      ExpectSameTrace(dev, cpu, what + " " + ScheduleName(s));
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      EXPECT_GT(dev.copies.cached_rows, 0) << what;
      EXPECT_EQ(dev.cache_rows.fill_bytes, cpu.stats.h2d_bytes + appended)
          << what;
      // Misses come from pinned segments; only sink and tail rows stage.
      EXPECT_EQ(dev.cache_rows.staged_bytes, appended) << what;
      const int64_t link = dev.copies.staged_bytes + dev.copies.direct_bytes +
                           dev.cache_rows.fill_bytes;
      EXPECT_LT(link, host_link) << what;
      std::printf(
          "%s %s: link %lld bytes (staged %lld, direct %lld, cache fill "
          "%lld, moved on device %lld; hits %lld of %lld lookups) vs host "
          "rows %lld\n",
          what.c_str(), ScheduleName(s), static_cast<long long>(link),
          static_cast<long long>(dev.copies.staged_bytes),
          static_cast<long long>(dev.copies.direct_bytes),
          static_cast<long long>(dev.cache_rows.fill_bytes),
          static_cast<long long>(dev.cache_rows.move_bytes),
          static_cast<long long>(cpu.stats.hits),
          static_cast<long long>(cpu.stats.lookups),
          static_cast<long long>(host_link));
    }
  }
}

// kv residency: with `device` every segment layer goes up once when first
// attended and is read in place after (no per-step segment copies: the
// fill is the appended rows plus the resident bytes); with `auto` and a
// budget too small for all of them, the rest stay on the host (refusals)
// and are copied per step as with `offload`. All equal the CPU backend.
TEST(DeviceBackendTest, SegmentsResidentOnTheDevice) {
  auto m = LoadArch("qwen3");
  ASSERT_NE(m, nullptr);
  const int prompt = 48, steps = 40;
  const int64_t appended = int64_t{prompt + steps} * m->config.n_layers *
                           m->config.n_kv_heads * m->config.head_dim * 2 * 2;
  const Trace cpu = Greedy(*m, Cpu(), prompt, steps);
  auto run = [&](ResidencyOptions r, Schedule s, const std::string& what) {
    FakeRuntime rt(Fake(s, 3));
    Trace t = Greedy(*m, Device(rt, {}, r), prompt, steps);
    ExpectSameTrace(t, cpu, what);
    EXPECT_TRUE(rt.OrderingStatus().ok()) << what << rt.OrderingStatus();
    const CacheRowsStats& c = t.cache_rows;
    std::printf(
        "%s: link %lld bytes (direct %lld, staged %lld, fill %lld), "
        "resident %lld bytes, %lld refusals\n",
        what.c_str(),
        static_cast<long long>(t.copies.direct_bytes + t.copies.staged_bytes +
                               c.fill_bytes),
        static_cast<long long>(t.copies.direct_bytes),
        static_cast<long long>(t.copies.staged_bytes),
        static_cast<long long>(c.fill_bytes),
        static_cast<long long>(c.resident_bytes),
        static_cast<long long>(c.resident_refusals));
    return t;
  };
  const Trace off = run(kOffload, Schedule::kInline, "offload");
  EXPECT_EQ(off.cache_rows.resident_bytes, 0);
  EXPECT_EQ(off.cache_rows.resident_refusals, 0);
  EXPECT_EQ(off.cache_rows.fill_bytes, appended);
  EXPECT_GT(off.copies.direct_bytes, 0);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    const Trace dev = run({KvResidency::kDevice, 0}, s,
                          std::string("device ") + ScheduleName(s));
    EXPECT_EQ(dev.copies.direct_bytes, 0);
    EXPECT_GT(dev.cache_rows.resident_bytes, 0);
    EXPECT_EQ(dev.cache_rows.resident_refusals, 0);
    EXPECT_EQ(dev.cache_rows.fill_bytes,
              appended + dev.cache_rows.resident_bytes);
    EXPECT_LT(dev.cache_rows.fill_bytes + dev.copies.staged_bytes,
              off.copies.direct_bytes + off.copies.staged_bytes +
                  off.cache_rows.fill_bytes);
  }
  // Room for about a third of what `device` kept.
  FakeRuntime probe_rt(Fake(Schedule::kInline));
  const Trace all = Greedy(*m, Device(probe_rt, {}, {KvResidency::kDevice, 0}),
                           prompt, steps);
  const int64_t budget = all.cache_rows.resident_bytes / 3;
  const Trace some = run({KvResidency::kAuto, budget}, Schedule::kLazy,
                         "auto, a third of the budget");
  EXPECT_GT(some.cache_rows.resident_bytes, 0);
  EXPECT_LE(some.cache_rows.resident_bytes, budget);
  EXPECT_GT(some.cache_rows.resident_refusals, 0);
  EXPECT_GT(some.copies.direct_bytes, 0);
  EXPECT_LT(some.copies.direct_bytes, off.copies.direct_bytes);
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
