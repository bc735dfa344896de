// Store rows in device memory on the fake device against the CPU backend:
// block caches, sink and tail mirrors (StoreRowsStayOnTheDevice) and
// resident segments per kv residency (SegmentsResidentOnTheDevice), each
// with the exact bytes that crossed the link, and `auto` under pressure
// (IdleSessionsMakeRoomUnderPressure).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/device/greedy_trace.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

// Store rows stay in device memory: copy-mode block caches keep their
// blocks there (a block selected again within cache_steps steps is read in
// place, only misses cross the link), and the sinks and open tail are
// mirrored there, written on the device by the append op (each appended
// row comes back once, 16-bit, and never goes up). The fill is exactly the
// caches' h2d_bytes (with host appends: plus the appended rows, each sent
// up once); the results equal the CPU
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
    host_rows.host_copy_mode = true;
    DeviceBackendDebug host_caches;  // the host decides (this test's subject)
    host_caches.host_copy_mode = true;
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
      const Trace dev = Greedy(*m, Device(rt, host_caches, kOffload), prompt,
                               steps, false, c);
      ExpectSameTrace(dev, cpu, what + " " + ScheduleName(s));
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      EXPECT_GT(dev.copies.cached_rows, 0) << what;
      EXPECT_EQ(dev.cache_rows.fill_bytes, cpu.stats.h2d_bytes) << what;
      // Misses come from pinned segments; the sink and tail rows were
      // written on the device.
      EXPECT_EQ(dev.cache_rows.staged_bytes, 0) << what;
      EXPECT_EQ(dev.copies.append_copy_bytes, appended) << what;
      // Every fill of a flush (misses, appended rows) is one scatter op.
      EXPECT_GT(dev.cache_rows.scatters, 0) << what;
      const int64_t link = dev.copies.staged_bytes + dev.copies.direct_bytes +
                           dev.cache_rows.fill_bytes;
      EXPECT_LT(link, host_link) << what;
      std::printf(
          "%s %s: link %lld bytes (staged %lld, direct %lld, cache fill "
          "%lld in %lld scatter ops, moved on device %lld; hits %lld of %lld "
          "lookups) vs host rows %lld\n",
          what.c_str(), ScheduleName(s), static_cast<long long>(link),
          static_cast<long long>(dev.copies.staged_bytes),
          static_cast<long long>(dev.copies.direct_bytes),
          static_cast<long long>(dev.cache_rows.fill_bytes),
          static_cast<long long>(dev.cache_rows.scatters),
          static_cast<long long>(dev.cache_rows.move_bytes),
          static_cast<long long>(cpu.stats.hits),
          static_cast<long long>(cpu.stats.lookups),
          static_cast<long long>(host_link));
    }
  }
}

// kv residency: with `device` every segment layer goes up once when first
// attended and is read in place after (no per-step segment copies: the
// fill is the resident bytes); with `auto` and a
// budget too small for all of them, the rest stay on the host (refusals)
// and are copied per step as with `offload`. All equal the CPU backend.
// Copy-mode block caches with resident segments: a miss whose rows a
// resident segment holds is copied on the device (D2D) instead of over
// the link. A 100-token prompt (two prefill chunks: the second attends the
// first's closed segments densely, which makes them resident with
// `device`); segments closing during decode stay on the host (copy mode
// asks no sparse layer for resident rows), so their misses still cross.
// Every miss is accounted for: H2D fill + D2D mirror = the caches'
// h2d_bytes + the resident uploads (appended rows are written on the
// device).
TEST(DeviceBackendTest, CopyModeMissesReadResidentSegments) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const int prompt = 100, steps = 40;
  const int64_t appended = int64_t{prompt + steps} * m->config.n_layers *
                           m->config.n_kv_heads * m->config.head_dim * 2 * 2;
  KvStoreConfig c = SparseConfig();
  c.cache_mode = CacheMode::kCopy;
  c.cache_steps = 1;
  const Trace cpu = Greedy(*m, Cpu(), prompt, steps, false, c, 64);
  DeviceBackendDebug host_caches;  // the host decides (this test's subject)
  host_caches.host_copy_mode = true;
  FakeRuntime off_rt(Fake(Schedule::kInline));
  const Trace off = Greedy(*m, Device(off_rt, host_caches, kOffload), prompt,
                           steps, false, c, 64);
  ExpectSameTrace(off, cpu, "offload");
  EXPECT_EQ(off.cache_rows.mirror_bytes, 0);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    const std::string what = std::string("device ") + ScheduleName(s);
    FakeRuntime rt(Fake(s, 9));
    const Trace dev =
        Greedy(*m, Device(rt, host_caches, {KvResidency::kDevice, 0}), prompt,
               steps, false, c, 64);
    ExpectSameTrace(dev, cpu, what);
    EXPECT_TRUE(rt.OrderingStatus().ok()) << what << rt.OrderingStatus();
    const CacheRowsStats& r = dev.cache_rows;
    EXPECT_GT(r.mirror_bytes, 0) << what;
    EXPECT_EQ(r.fill_bytes + r.mirror_bytes,
              cpu.stats.h2d_bytes + r.resident_bytes)
        << what;
    EXPECT_EQ(dev.copies.append_copy_bytes, appended) << what;
    EXPECT_EQ(off.cache_rows.fill_bytes, cpu.stats.h2d_bytes);
    std::printf(
        "%s: misses %lld bytes, %lld of them D2D from resident segments; "
        "H2D fill %lld (offload: %lld)\n",
        what.c_str(), static_cast<long long>(cpu.stats.h2d_bytes),
        static_cast<long long>(r.mirror_bytes),
        static_cast<long long>(r.fill_bytes),
        static_cast<long long>(off.cache_rows.fill_bytes));
  }
}

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
  EXPECT_EQ(off.cache_rows.fill_bytes, 0);  // appends written on the device
  EXPECT_EQ(off.copies.append_copy_bytes, appended);
  EXPECT_GT(off.copies.direct_bytes, 0);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    const Trace dev = run({KvResidency::kDevice, 0}, s,
                          std::string("device ") + ScheduleName(s));
    EXPECT_EQ(dev.copies.direct_bytes, 0);
    EXPECT_GT(dev.cache_rows.resident_bytes, 0);
    EXPECT_EQ(dev.cache_rows.resident_refusals, 0);
    EXPECT_EQ(dev.cache_rows.fill_bytes, dev.cache_rows.resident_bytes);
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

// Sessions taking turns on one backend: each phase decodes its sessions
// together for `steps` steps (a session is prefilled, alone, before its
// first phase); the arena's statistics after every phase.
struct TurnsRun {
  std::vector<std::vector<float>> logits;  // every output, in order
  std::vector<CacheRowsStats> after;       // per phase (device only)
  std::vector<int64_t> segment_layers;     // per phase: of its sessions
  absl::Status status;
};

TurnsRun TakeTurns(const Model& m, std::unique_ptr<Backend> backend,
                   const std::vector<std::vector<int>>& phases, int steps) {
  const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
  const StoreEnv env = backend->store_env();
  Transformer tf(m.config, m.weights, {1, 64}, std::move(backend));
  const int vocab = m.config.vocab_size;
  std::vector<std::unique_ptr<ClusteredKvStore>> stores;
  std::vector<std::vector<float>> last;
  TurnsRun r;
  auto forward = [&](std::vector<SequenceInput> in) {
    if (r.status.ok()) r.status = tf.Forward(absl::MakeSpan(in));
  };
  for (const std::vector<int>& phase : phases) {
    for (const int s : phase) {
      if (s < static_cast<int>(stores.size())) continue;
      stores.push_back(std::make_unique<ClusteredKvStore>(
          KvShapeOf(m.config), SparseConfig(), nullptr, env));
      last.emplace_back();
      const auto p = Tokens(48, vocab, 37 + 6 * s, 5 + s);
      forward(
          {MakeInput(p, stores.back().get(), LogitsMode::kLast, &last.back())});
      r.logits.push_back(last.back());
    }
    for (int i = 0; i < steps; ++i) {
      std::vector<int32_t> toks;
      for (const int s : phase) toks.push_back(Argmax(last[s]));
      std::vector<SequenceInput> batch;
      for (size_t j = 0; j < phase.size(); ++j) {
        batch.push_back(MakeInput(absl::MakeConstSpan(&toks[j], 1),
                                  stores[phase[j]].get(), LogitsMode::kLast,
                                  &last[phase[j]], AppendKind::kGenerated));
      }
      forward(std::move(batch));
      for (const int s : phase) r.logits.push_back(last[s]);
    }
    int64_t layers = 0;
    for (const int s : phase) {
      layers += static_cast<int64_t>(stores[s]->segments().size()) *
                m.config.n_layers;
    }
    r.segment_layers.push_back(layers);
    if (device != nullptr) r.after.push_back(device->cache_rows().stats());
  }
  return r;
}

// kv residency auto under pressure, with room for about one session's
// segments: A decodes, then B alone (A idle: A's segments are evicted to
// make room for B's), then A alone (B's evicted for A's), then both
// together — sessions decoding together never evict each other: B stays
// on the host (refused once per segment layer, however many steps ask)
// and is read through the host path. Every output equals the CPU
// backend's; the residency stays within its budget.
TEST(DeviceBackendTest, IdleSessionsMakeRoomUnderPressure) {
  auto m = LoadArch("qwen3");
  ASSERT_NE(m, nullptr);
  const int steps = 8;
  const std::vector<std::vector<int>> phases = {{0}, {1}, {0}, {0, 1}};
  const TurnsRun cpu = TakeTurns(*m, Cpu(), phases, steps);
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  // What one session keeps resident after a phase, with room for all.
  FakeRuntime probe_rt(Fake(Schedule::kInline));
  const TurnsRun all = TakeTurns(
      *m, Device(probe_rt, {}, {KvResidency::kDevice, 0}), {{0}}, steps);
  ASSERT_TRUE(all.status.ok()) << all.status;
  const int64_t one = all.after[0].resident_bytes;
  ASSERT_GT(one, 0);
  for (Schedule s : {Schedule::kLazy, Schedule::kThreaded}) {
    const std::string what = ScheduleName(s);
    FakeRuntime rt(Fake(s, 9));
    const ResidencyOptions auto_one{KvResidency::kAuto, one * 5 / 4};
    const TurnsRun dev = TakeTurns(*m, Device(rt, {}, auto_one), phases, steps);
    ASSERT_TRUE(dev.status.ok()) << what << dev.status;
    ASSERT_EQ(dev.logits.size(), cpu.logits.size());
    for (size_t i = 0; i < cpu.logits.size(); ++i) {
      EXPECT_LE(RelDiff(dev.logits[i], cpu.logits[i]), 1e-5)
          << what << " output " << i;
    }
    EXPECT_TRUE(rt.OrderingStatus().ok()) << what << rt.OrderingStatus();
    const std::vector<CacheRowsStats>& a = dev.after;
    ASSERT_EQ(a.size(), phases.size());
    for (const CacheRowsStats& c : a) {
      EXPECT_GT(c.resident_bytes, 0) << what;
      EXPECT_LE(c.resident_bytes, auto_one.budget_bytes) << what;
      std::printf(
          "%s: resident %lld bytes, %lld evictions (%lld bytes), %lld "
          "refusals, fill %lld\n",
          what.c_str(), static_cast<long long>(c.resident_bytes),
          static_cast<long long>(c.resident_evictions),
          static_cast<long long>(c.evicted_bytes),
          static_cast<long long>(c.resident_refusals),
          static_cast<long long>(c.fill_bytes));
    }
    // Every evicted segment layer's rows were freed in stream order
    // (FreeAsync: no device-wide wait), and the checker saw no later use.
    EXPECT_GE(a[3].rows_freed, a[3].resident_evictions) << what;
    EXPECT_EQ(a[0].resident_evictions, 0) << what;  // A alone fits
    EXPECT_GT(a[1].resident_evictions, a[0].resident_evictions) << what;
    EXPECT_GT(a[2].resident_evictions, a[1].resident_evictions) << what;
    EXPECT_EQ(a[3].resident_evictions, a[2].resident_evictions) << what;
    EXPECT_GT(a[3].resident_refusals, a[2].resident_refusals) << what;
    // Once per segment layer, not once per step that asked.
    EXPECT_LE(a[3].resident_refusals - a[2].resident_refusals,
              dev.segment_layers[3])
        << what;
  }
  // With room for everything nothing is evicted.
  FakeRuntime rt(Fake(Schedule::kInline));
  const TurnsRun dev =
      TakeTurns(*m, Device(rt, {}, {KvResidency::kDevice, 0}), phases, steps);
  ASSERT_TRUE(dev.status.ok()) << dev.status;
  EXPECT_EQ(dev.after.back().resident_evictions, 0);
  EXPECT_EQ(dev.after.back().resident_refusals, 0);
}

}  // namespace
}  // namespace ckv
