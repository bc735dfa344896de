// The KV append on the device (docs/device-backend.md, "KV append on the
// device"): the step's new K,V rows written into the stores' device rows
// (sink and tail mirrors) by one append_rows op per layer, the host's
// copies filled before Commit, against host appends and the CPU backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/device/greedy_trace.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

// Appending on the device changes where rows are converted and what
// crosses the link, not what is computed: logits, greedy tokens,
// selections and cache statistics equal the CPU backend's and the host
// appends' bit for bit, under every schedule with the ordering checker
// clean. A 100-token prompt in forward steps of 64 (the second step
// appends to a tail that the first left open; sinks filled by the first),
// then 24 decode steps with 16-token windows (segments close mid-run, the
// tail moves down). Every appended token of every layer is written once
// on the device and comes back once as 16-bit K and V; the F32 k and v
// rows no longer come back, and the sink and tail rows no longer go up
// (only what a closing tail moves down is sent again); and a layer whose
// selection reads no queries (the dense layer; every layer of a prefill
// step) does not wait for the device.
TEST(DeviceBackendTest, AppendsOnTheDeviceEqualHostAppends) {
  for (const std::string arch : {"llama", "gemma3"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    const ModelConfig& c = m->config;
    const int prompt = 100, steps = 24, chunk = 64;
    const int64_t tokens = int64_t{prompt + steps} * c.n_layers;
    const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
    const int64_t forward_steps = 2 + steps;
    const Trace cpu =
        Greedy(*m, Cpu(), prompt, steps, false, SparseConfig(), chunk);
    DeviceBackendDebug host_debug;
    host_debug.host_appends = true;
    FakeRuntime host_rt(Fake(Schedule::kInline));
    const Trace host = Greedy(*m, Device(host_rt, host_debug, kOffload), prompt,
                              steps, false, SparseConfig(), chunk);
    ExpectSameTrace(host, cpu, arch + " host appends");
    EXPECT_EQ(host.copies.appended_tokens, 0) << arch;
    EXPECT_EQ(host.copies.append_ops, 0) << arch;
    for (Schedule s :
         {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
      const std::string what = arch + " " + ScheduleName(s);
      FakeRuntime rt(Fake(s, 5));
      const Trace dev = Greedy(*m, Device(rt, {}, kOffload), prompt, steps,
                               false, SparseConfig(), chunk);
      ExpectSameTrace(dev, cpu, what);
      EXPECT_TRUE(rt.OrderingStatus().ok()) << what << rt.OrderingStatus();
      EXPECT_EQ(dev.copies.appended_tokens, tokens) << what;
      EXPECT_EQ(dev.copies.append_ops, forward_steps * c.n_layers) << what;
      EXPECT_EQ(dev.copies.append_copy_bytes, tokens * kv_dim * 2 * 2) << what;
      // k and v (F32) stay on the device; q comes back only for the
      // decode steps' layers that select sparsely or are recorded (all but
      // the dense layer 0): prefill steps read nothing back per layer.
      EXPECT_EQ(dev.copies.qkv_bytes,
                int64_t{steps} * (c.n_layers - 1) * q_dim * 4)
          << what;
      EXPECT_EQ(host.copies.qkv_bytes, tokens * (q_dim + 2 * kv_dim) * 4)
          << what;
      EXPECT_LT(dev.cache_rows.staged_bytes, host.cache_rows.staged_bytes)
          << what;
      // And a decode step does not wait for the dense layer.
      ASSERT_EQ(dev.step_syncs.size(), host.step_syncs.size()) << what;
      for (size_t i = 1; i < dev.step_syncs.size(); ++i) {
        EXPECT_EQ(dev.step_syncs[i], host.step_syncs[i] - 1) << what << i;
      }
      // Under the cap: only the staging's first growths wait.
      EXPECT_LE(dev.copies.append_waits, 2) << what;
      std::printf(
          "%s: q/k/v down %lld bytes + appended rows down %lld (host "
          "appends: %lld); sink/tail rows up %lld (host appends: %lld); "
          "%lld append ops\n",
          what.c_str(), static_cast<long long>(dev.copies.qkv_bytes),
          static_cast<long long>(dev.copies.append_copy_bytes),
          static_cast<long long>(host.copies.qkv_bytes),
          static_cast<long long>(dev.cache_rows.staged_bytes),
          static_cast<long long>(host.cache_rows.staged_bytes),
          static_cast<long long>(dev.copies.append_ops));
    }
    // A staging cap below one layer's rows: the caches are filled before
    // every layer's append (waiting where nothing else waited since), with
    // the same results.
    DeviceBackendDebug capped;
    capped.append_stage_cap_bytes = 1;
    FakeRuntime capped_rt(Fake(Schedule::kLazy, 5));
    const Trace small = Greedy(*m, Device(capped_rt, capped, kOffload), prompt,
                               steps, false, SparseConfig(), chunk);
    ExpectSameTrace(small, cpu, arch + " capped staging");
    EXPECT_TRUE(capped_rt.OrderingStatus().ok()) << capped_rt.OrderingStatus();
    // At least every decode step: its sparse layer 1 first fills the rows
    // of the dense layer 0, which did not wait (25 measured: the prefill
    // steps' other fills follow waits for their growing KV staging).
    EXPECT_GE(small.copies.append_waits, steps) << arch;
  }
}

// SparseConfig with `policy`.
KvStoreConfig WithPolicy(KvPolicy policy) {
  KvStoreConfig c = SparseConfig();
  c.policy = policy;
  return c;
}

// A layer waits for the device only when its selection needs the host:
// streaming plans from positions alone, and clusterkv's sparse layers
// attend row lists its planner builds on the device from the plans it
// makes there (read back only at the step's end), over segments resident
// on the device or offloaded (pinned rows read in place): no layer waits,
// a decode step waits for its logits and at its end. Without the lists
// (host_row_lists) every sparse layer waits for its plans. Logits
// bit-equal to the CPU backend's.
TEST(DeviceBackendTest, DecodeLayersWaitOnlyWithoutRowLists) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  struct Case {
    const char* name;
    KvPolicy policy;
    bool host_row_lists;
    ResidencyOptions residency;
  };
  for (const Case& k :
       {Case{"streaming", KvPolicy::kStreaming, false, {}},
        Case{"clusterkv", KvPolicy::kClusterKv, false, {}},
        Case{"clusterkv, offloaded", KvPolicy::kClusterKv, false, kOffload},
        Case{"clusterkv, host row lists", KvPolicy::kClusterKv, true, {}}}) {
    const Unrecorded cpu = DecodeUnrecorded(*m, Cpu(), WithPolicy(k.policy));
    FakeRuntime rt(Fake(Schedule::kThreaded, 3));
    DeviceBackendDebug debug;
    debug.host_row_lists = k.host_row_lists;
    const Unrecorded dev = DecodeUnrecorded(*m, Device(rt, debug, k.residency),
                                            WithPolicy(k.policy));
    ASSERT_TRUE(cpu.status.ok()) << cpu.status;
    ASSERT_TRUE(dev.status.ok()) << dev.status;
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    EXPECT_EQ(dev.logits, cpu.logits) << k.name;
    const bool layer_waits = k.host_row_lists;
    const int64_t layers =
        layer_waits ? m->config.n_layers - SparseConfig().dense_layers : 0;
    ASSERT_EQ(dev.waits.size(), 12u);
    for (size_t i = 1; i < dev.waits.size(); ++i) {  // the first may grow
      EXPECT_EQ(dev.waits[i], layers + 2) << k.name << " step " << i;
    }
    const bool listed = k.policy == KvPolicy::kClusterKv && !k.host_row_lists;
    // Every sparse layer of every decode step after the first segment
    // closed: its plan deferred, one row_lists op, its spans listed.
    EXPECT_EQ(dev.deferred_calls > 0, listed) << k.name;
    EXPECT_EQ(dev.list_ops, dev.deferred_calls) << k.name;
    EXPECT_EQ(dev.copies.listed_spans > 0, listed) << k.name;
    std::printf(
        "%s: decode step waits %lld, deferred plans %lld, row_lists "
        "ops %lld, listed spans %lld\n",
        k.name, static_cast<long long>(dev.waits.back()),
        static_cast<long long>(dev.deferred_calls),
        static_cast<long long>(dev.list_ops),
        static_cast<long long>(dev.copies.listed_spans));
  }
}

// The attention over row lists launched without waiting for the planner's
// lists_ready event: the ordering checker reports the race with the
// row_lists op that writes them (inline and threaded schedules).
TEST(DeviceBackendTest, PlantedMissingListsWaitIsCaught) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  DeviceBackendDebug planted;
  planted.skip_lists_wait = true;
  for (Schedule s : {Schedule::kInline, Schedule::kThreaded}) {
    FakeRuntime rt(Fake(s, 6));
    const Unrecorded bad = DecodeUnrecorded(*m, Device(rt, planted),
                                            WithPolicy(KvPolicy::kClusterKv));
    EXPECT_GT(bad.list_ops, 0) << ScheduleName(s);
    const absl::Status order = rt.OrderingStatus();
    EXPECT_FALSE(order.ok()) << ScheduleName(s);
    EXPECT_NE(order.message().find("row_lists_batch"), absl::string_view::npos)
        << order;
  }
}

// A dense store (policy full: no selection reads queries, so no layer
// waits for the device) prefills 40 tokens and decodes 6 steps with
// logits, then 4 steps without: their only wait is FinishAppends' own.
// Returns the runtime's ordering report; *rows gets every layer's host K
// rows of KV head 0 (sinks, segments, tail).
absl::Status DecodeWithoutLogits(FakeRuntime& rt, DeviceBackendDebug debug,
                                 std::vector<std::vector<float>>* rows) {
  auto m = LoadArch("llama");
  if (m == nullptr) return absl::NotFoundError("llama test model");
  auto backend = Device(rt, debug, {KvResidency::kDevice, 0});
  StoreEnv env = backend->store_env();
  Transformer tf(m->config, m->weights, {1, 64}, std::move(backend));
  KvStoreConfig c = SparseConfig();
  c.policy = KvPolicy::kFull;
  ClusteredKvStore store(KvShapeOf(m->config), c, nullptr, std::move(env));
  std::vector<float> logits;
  const std::vector<int32_t> p = Tokens(40, m->config.vocab_size);
  SequenceInput in = MakeInput(p, &store, LogitsMode::kLast, &logits);
  if (auto s = tf.Forward(absl::MakeSpan(&in, 1)); !s.ok()) return s;
  for (int i = 0; i < 10; ++i) {
    const int32_t tok[1] = {Argmax(logits) + i};
    SequenceInput s =
        MakeInput(tok, &store, i < 6 ? LogitsMode::kLast : LogitsMode::kNone,
                  &logits, AppendKind::kGenerated);
    if (auto st = tf.Forward(absl::MakeSpan(&s, 1)); !st.ok()) return st;
  }
  for (int l = 0; l < m->config.n_layers; ++l) {
    rows->emplace_back();
    for (const kernels::KvSpan& span : store.HostSpans(l, 0)) {
      const auto* k = static_cast<const uint16_t*>(span.k);
      for (int64_t i = 0; i < span.count * m->config.head_dim; ++i) {
        rows->back().push_back(kernels::F16ToF32(k[i]));
      }
    }
  }
  return rt.OrderingStatus();
}

// A step without logits (and no layer that reads queries) has no wait
// after its append ops, so FinishAppends must wait itself: without that
// wait (planted) the ordering checker reports the host's read of the
// copies racing the op, on the inline and the lazy schedule (where the
// host then reads poisoned bytes: its rows differ from the correct run's).
TEST(DeviceBackendTest, PlantedMissingAppendWaitIsCaught) {
  for (Schedule s : {Schedule::kInline, Schedule::kLazy}) {
    std::vector<std::vector<float>> good_rows, bad_rows;
    FakeRuntime good_rt(Fake(s));
    const absl::Status good = DecodeWithoutLogits(good_rt, {}, &good_rows);
    EXPECT_TRUE(good.ok()) << ScheduleName(s) << good;
    DeviceBackendDebug plant;
    plant.skip_append_wait = true;
    FakeRuntime bad_rt(Fake(s));
    const absl::Status bad = DecodeWithoutLogits(bad_rt, plant, &bad_rows);
    EXPECT_FALSE(bad.ok()) << ScheduleName(s);
    std::printf("%s: %s\n", ScheduleName(s), bad.ToString().c_str());
    ASSERT_EQ(good_rows.size(), 3u);
    EXPECT_EQ(good_rows[0].size(), 50u * 16);  // 50 tokens, head_dim 16
    if (s == Schedule::kLazy) {
      EXPECT_NE(bad_rows, good_rows);
    }
  }
}

}  // namespace
}  // namespace ckv
