// Copy mode decided on the device (docs/device-backend.md, "Copy mode's
// block cache on the device"): the planner's block caches and its
// cache_lists op against the CPU backend's copy mode, and against the
// device's host-decided caches (DeviceBackendDebug::host_copy_mode).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/device/greedy_trace.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

KvStoreConfig CopyConfig(int cache_steps) {
  KvStoreConfig c = SparseConfig();
  c.cache_mode = CacheMode::kCopy;
  c.cache_steps = cache_steps;
  return c;
}

// Segments offloaded (pinned host rows), 48-token prompt, 40 greedy
// steps, R = 0, 1, 3, three schedules: attended positions per (step,
// layer, head), the caches' statistics and greedy tokens equal to the CPU
// backend's, logits bit-equal (the lists keep the CPU's copy-mode order),
// the ordering checker clean; every sparse decode layer listed over a
// cache arena (cache_lists ops), no miss copied by the host-managed cache
// rows (their fill is the host-decided path's).
TEST(DeviceBackendTest, CopyModeDecidedOnTheDevice) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const int prompt = 48, steps = 40;
  for (const int r : {0, 1, 3}) {
    const KvStoreConfig c = CopyConfig(r);
    const std::string what = "cache_steps " + std::to_string(r);
    const Trace cpu = Greedy(*m, Cpu(), prompt, steps, false, c);
    for (Schedule s :
         {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
      FakeRuntime rt(Fake(s, 13));
      const Trace dev =
          Greedy(*m, Device(rt, {}, kOffload), prompt, steps, false, c);
      const std::string at = what + " " + ScheduleName(s);
      ExpectSameTrace(dev, cpu, at);
      EXPECT_TRUE(dev.logits == cpu.logits) << at << ": not bit-equal";
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      EXPECT_GT(dev.cache_ops, 0) << at;
      EXPECT_GT(dev.copies.listed_spans, 0) << at;
      EXPECT_EQ(dev.cache_rows.fill_bytes, 0) << at;
      std::printf(
          "%s: cache_lists ops %lld, listed spans %lld, hits %lld of "
          "%lld lookups\n",
          at.c_str(), static_cast<long long>(dev.cache_ops),
          static_cast<long long>(dev.copies.listed_spans),
          static_cast<long long>(cpu.stats.hits),
          static_cast<long long>(cpu.stats.lookups));
    }
  }
}

// Unrecorded decode (the recall probe off: nothing reads the queries), 12
// steps after a 40-token prompt: with the device's caches a copy-mode
// decode step waits only for its logits and at its end; with the
// host-decided caches every sparse layer waits for its plans. Logits
// bit-equal to the CPU backend's both ways, statistics equal.
TEST(DeviceBackendTest, CopyModeOnTheDeviceWaitsOnlyForLogits) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const KvStoreConfig c = CopyConfig(1);
  auto run = [&](std::unique_ptr<Backend> backend, std::vector<int64_t>* waits,
                 CacheStats* stats) {
    const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
    StoreEnv env = backend->store_env();
    Transformer tf(m->config, m->weights, {1, 64}, std::move(backend));
    ClusteredKvStore store(KvShapeOf(m->config), c, nullptr, std::move(env));
    std::vector<std::vector<float>> all;
    std::vector<float> logits;
    const std::vector<int32_t> p = Tokens(40, m->config.vocab_size);
    SequenceInput in = MakeInput(p, &store, LogitsMode::kLast, &logits);
    EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
    for (int i = 0; i < 12; ++i) {
      const int32_t tok[1] = {Argmax(logits)};
      SequenceInput s = MakeInput(tok, &store, LogitsMode::kLast, &logits,
                                  AppendKind::kGenerated);
      const int64_t before = device ? device->stream_syncs() : 0;
      EXPECT_TRUE(tf.Forward(absl::MakeSpan(&s, 1)).ok());
      if (device) waits->push_back(device->stream_syncs() - before);
      all.push_back(logits);
    }
    *stats = store.cache_stats();
    return all;
  };
  std::vector<int64_t> none;
  CacheStats cpu_stats;
  const auto cpu = run(Cpu(), &none, &cpu_stats);
  const int64_t sparse = m->config.n_layers - SparseConfig().dense_layers;
  for (const bool host : {false, true}) {
    const char* what = host ? "host-decided caches" : "device caches";
    FakeRuntime rt(Fake(Schedule::kThreaded, 5));
    DeviceBackendDebug debug;
    debug.host_copy_mode = host;
    std::vector<int64_t> waits;
    CacheStats stats;
    const auto dev = run(Device(rt, debug, kOffload), &waits, &stats);
    EXPECT_TRUE(dev == cpu) << what << ": logits not bit-equal";
    ExpectSameCacheStats(stats, cpu_stats);
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    ASSERT_EQ(waits.size(), 12u);
    for (size_t i = 1; i < waits.size(); ++i) {  // the first may grow
      EXPECT_EQ(waits[i], (host ? sparse : 0) + 2) << what << " step " << i;
    }
    std::printf("%s: decode step waits %lld\n", what,
                static_cast<long long>(waits.back()));
  }
}

}  // namespace
}  // namespace ckv
