// Graph regions on the fake device (DeviceBackend, device_graphs.cc): the
// Transformer's runs of ops between attentions captured once per (region,
// rows) and replayed after, equal to the CPU backend under every schedule;
// buffers that move make the region run eagerly and be captured again,
// and a planted replay of the stale graph is caught as a use after free.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tests/device/greedy_trace.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

DeviceBackendDebug NoGraphs() {
  DeviceBackendDebug d;
  d.no_graphs = true;
  return d;
}

// Every decode step after the second replays both regions of every layer
// (the first runs them eagerly, the second captures them); the results are
// the CPU backend's, bit for bit, with or without graphs.
TEST(DeviceGraphsTest, DecodeStepsReplayTheirRegions) {
  for (const std::string arch : {"llama", "gemma3", "qwen2"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    const int prompt = 48, steps = 40;
    const Trace cpu = Greedy(*m, Cpu(), prompt, steps);
    for (Schedule s :
         {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
      const std::string what = arch + " " + ScheduleName(s);
      FakeRuntime rt(Fake(s, 13));
      const Trace dev = Greedy(*m, Device(rt), prompt, steps);
      ExpectSameTrace(dev, cpu, what);
      EXPECT_TRUE(rt.OrderingStatus().ok()) << what << rt.OrderingStatus();
      const int64_t regions = 2 * m->config.n_layers;
      EXPECT_EQ(dev.graphs.captures, regions) << what;
      EXPECT_GE(dev.graphs.replays, (steps - 1) * regions) << what;
      std::printf("%s: %lld captures, %lld replays, %lld eager runs\n",
                  what.c_str(), static_cast<long long>(dev.graphs.captures),
                  static_cast<long long>(dev.graphs.replays),
                  static_cast<long long>(dev.graphs.eager));
    }
    FakeRuntime rt(Fake(Schedule::kLazy, 13));
    const Trace eager = Greedy(*m, Device(rt, NoGraphs()), prompt, steps);
    ExpectSameTrace(eager, cpu, arch + " without graphs");
    EXPECT_EQ(eager.graphs.replays, 0);
    EXPECT_EQ(eager.graphs.captures, 0);
  }
}

// A decode step waits for the device once per layer whose selection reads
// the queries on the host (q/k/v for a dense cache, which appends on the
// host; q for the clustered store's sparse or recorded layers, all but its
// dense_layers: it appends on the device), for its logits and at its end:
// its inputs (positions, token, picked row) go up from the step staging
// without a wait (each was a synchronisation of its own before).
TEST(DeviceGraphsTest, DecodeStepWaitsOncePerLayerAndForItsLogits) {
  for (const std::string arch : {"llama", "gemma3"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    for (const bool dense : {true, false}) {
      FakeRuntime rt(Fake(Schedule::kThreaded, 3));
      const Trace dev = Greedy(*m, Device(rt), 40, 12, dense);
      const Trace cpu = Greedy(*m, Cpu(), 40, 12, dense);
      ExpectSameTrace(dev, cpu, arch);
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      ASSERT_EQ(dev.step_syncs.size(), 12u);
      // From the second: the first decode step may grow a staging buffer
      // (a wait each: 1 dense, 2 sparse here).
      EXPECT_LE(dev.step_syncs[0], m->config.n_layers + 4) << arch;
      const int reading =
          dense ? m->config.n_layers
                : m->config.n_layers - SparseConfig().dense_layers;
      for (size_t i = 1; i < dev.step_syncs.size(); ++i) {
        EXPECT_EQ(dev.step_syncs[i], reading + 2)
            << arch << (dense ? " dense" : " sparse") << " step " << i;
      }
    }
  }
}

// BackendOptions::device_graphs (the server's --device-graphs): the fake
// backend MakeBackend builds replays by default and launches every op with
// it off; the answers are the same.
TEST(DeviceGraphsTest, BackendOptionTurnsGraphsOff) {
  auto m = LoadArch("qwen3");
  ASSERT_NE(m, nullptr);
  const Trace cpu = Greedy(*m, Cpu(), 20, 8);
  for (const bool graphs : {true, false}) {
    BackendOptions o;
    o.device_graphs = graphs;
    auto backend = MakeBackend(BackendKind::kFake, o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    const Trace dev = Greedy(*m, *std::move(backend), 20, 8);
    ExpectSameTrace(dev, cpu, graphs ? "graphs" : "no graphs");
    if (graphs) {
      EXPECT_GT(dev.graphs.replays, 0);
    } else {
      EXPECT_EQ(dev.graphs.replays, 0);
      EXPECT_EQ(dev.graphs.captures, 0);
    }
  }
}

struct MovedRun {
  std::vector<std::vector<float>> logits;
  absl::Status status;
  GraphStats graphs;
};

// A decodes 4 steps (its regions captured at 1 row), B prefills 100
// tokens (every activation buffer grows: new addresses), A decodes 4 more.
MovedRun BuffersMove(const Model& m, std::unique_ptr<Backend> backend) {
  const auto* device = dynamic_cast<const DeviceBackend*>(backend.get());
  const StoreEnv env = backend->store_env();
  Transformer tf(m.config, m.weights, {1, 256}, std::move(backend));
  ClusteredKvStore a(KvShapeOf(m.config), SparseConfig(), nullptr, env);
  ClusteredKvStore b(KvShapeOf(m.config), SparseConfig(), nullptr, env);
  MovedRun r;
  std::vector<float> la, lb;
  const int vocab = m.config.vocab_size;
  auto run = [&](std::vector<SequenceInput> in) {
    if (r.status.ok()) r.status = tf.Forward(absl::MakeSpan(in));
  };
  auto decode_a = [&](int steps) {
    for (int i = 0; i < steps && r.status.ok(); ++i) {
      const int32_t tok[1] = {Argmax(la)};
      run({MakeInput(tok, &a, LogitsMode::kLast, &la, AppendKind::kGenerated)});
      r.logits.push_back(la);
    }
  };
  run({MakeInput(Tokens(24, vocab), &a, LogitsMode::kLast, &la)});
  r.logits.push_back(la);
  decode_a(4);
  run({MakeInput(Tokens(100, vocab, 11, 3), &b, LogitsMode::kLast, &lb)});
  r.logits.push_back(lb);
  decode_a(4);
  if (device != nullptr) r.graphs = device->graph_stats();
  return r;
}

TEST(DeviceGraphsTest, MovedBuffersAreCapturedAgain) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const MovedRun cpu = BuffersMove(*m, Cpu());
  ASSERT_TRUE(cpu.status.ok()) << cpu.status;
  FakeRuntime rt(Fake(Schedule::kThreaded, 3));
  const MovedRun dev = BuffersMove(*m, Device(rt));
  ASSERT_TRUE(dev.status.ok()) << dev.status;
  ASSERT_EQ(dev.logits.size(), cpu.logits.size());
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    EXPECT_LE(RelDiff(dev.logits[i], cpu.logits[i]), 1e-5) << "output " << i;
  }
  EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
  // Captured at one row before B's prefill and again after it.
  EXPECT_EQ(dev.graphs.captures, 2 * 2 * m->config.n_layers);
  EXPECT_GT(dev.graphs.replays, 0);
}

// Planted: replaying a region's graph without checking its ranges reads
// the activation buffers freed when B's prefill grew them.
TEST(DeviceGraphsTest, PlantedStaleGraphIsUseAfterFree) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  DeviceBackendDebug planted;
  planted.replay_stale_graphs = true;
  FakeRuntime rt(Fake(Schedule::kInline));
  const MovedRun dev = BuffersMove(*m, Device(rt, planted));
  ASSERT_FALSE(dev.status.ok());
  EXPECT_NE(dev.status.message().find("use after free"), std::string::npos)
      << dev.status;
}

}  // namespace
}  // namespace ckv
