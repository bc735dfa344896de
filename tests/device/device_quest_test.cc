// Quest stores planned on the device (DevicePlanner with quest's page
// scores and kSelectTopPages) against the same stores planned by the quest
// policy on the host (DeviceBackendDebug::host_selection) and the CPU
// backend: equal attended positions per (step, layer, head), cache
// statistics and greedy tokens, bit-equal logits, in both GQA modes, a
// page size that does not divide the budget (the last page of a segment
// shorter), zero-copy row lists and copy mode's device caches; and a
// quest decode step that no longer waits per sparse layer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/device/greedy_trace.h"

namespace ckv {
namespace {

using namespace ::ckv::device_test;  // NOLINT(build/namespaces)

// Quest at a budget of 19 in pages of 6 (ceil: 4 pages, up to 24 tokens);
// segments of 16 rows close during decode (pages of 6, 6, 4). recent_tokens
// is set, and ignored: quest plans no recent pages (nor does its store).
KvStoreConfig QuestConfig(GqaSelection gqa) {
  KvStoreConfig c = SparseConfig();
  c.policy = KvPolicy::kQuest;
  c.budget = 19;
  c.quest_page_size = 6;
  c.recent_tokens = 5;
  c.gqa_selection = gqa;
  return c;
}

std::string Name(const std::string& arch, GqaSelection gqa, bool copy) {
  return arch +
         (gqa == GqaSelection::kPerKvHead ? " per_kv_head"
                                          : " per_query_head") +
         (copy ? " copy" : " zero-copy");
}

// Device plans equal the host policy's; row lists (zero-copy) or the
// device's block caches (copy mode) built from them.
TEST(DeviceBackendTest, QuestDevicePlansEqualTheHostPolicy) {
  for (const std::string arch : {"llama", "qwen3"}) {
    auto m = LoadArch(arch);
    ASSERT_NE(m, nullptr);
    for (GqaSelection gqa :
         {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
      for (bool copy : {false, true}) {
        KvStoreConfig c = QuestConfig(gqa);
        if (copy) c.cache_mode = CacheMode::kCopy;
        const std::string what = Name(arch, gqa, copy);
        FakeRuntime host_rt(Fake(Schedule::kInline));
        const Trace host =
            Greedy(*m, Device(host_rt, HostSelectionDebug()), 48, 32, false, c);
        EXPECT_EQ(host.device_plans, 0) << what;
        const Trace cpu = Greedy(*m, Cpu(), 48, 32, false, c);
        FakeRuntime rt(Fake(Schedule::kThreaded, 6));
        const Trace device = Greedy(*m, Device(rt), 48, 32, false, c);
        ExpectSameTrace(device, host, what);
        ExpectSameTrace(device, cpu, what + " (cpu)");
        EXPECT_TRUE(device.logits == host.logits) << what << ": not bit-equal";
        EXPECT_GT(device.device_plans, 0) << what;
        EXPECT_GT(device.list_ops, 0) << what;
        EXPECT_EQ(device.cache_ops > 0, copy) << what;
        EXPECT_EQ(device.table_fallbacks, 0) << what;
        EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
        std::printf(
            "%s: %lld layers planned on the device, %lld row_lists "
            "ops, %lld cache_lists ops\n",
            what.c_str(), static_cast<long long>(device.device_plans),
            static_cast<long long>(device.list_ops),
            static_cast<long long>(device.cache_ops));
      }
    }
  }
}

// A quest decode step on the device waits for its logits and at its end
// only (2), where host planning waits once more per sparse layer for the
// queries; every sparse layer's plan deferred, one row_lists op each.
TEST(DeviceBackendTest, QuestDecodeLayersDoNotWait) {
  auto m = LoadArch("llama");
  ASSERT_NE(m, nullptr);
  const int64_t sparse = m->config.n_layers - SparseConfig().dense_layers;
  for (GqaSelection gqa :
       {GqaSelection::kPerQueryHead, GqaSelection::kPerKvHead}) {
    const KvStoreConfig c = QuestConfig(gqa);
    const std::string what = Name("llama", gqa, false);
    const Unrecorded cpu = DecodeUnrecorded(*m, Cpu(), c);
    for (bool host_planning : {false, true}) {
      FakeRuntime rt(Fake(Schedule::kThreaded, 3));
      const Unrecorded dev =
          DecodeUnrecorded(*m,
                           Device(rt, host_planning ? HostSelectionDebug()
                                                    : DeviceBackendDebug{}),
                           c);
      ASSERT_TRUE(cpu.status.ok()) << cpu.status;
      ASSERT_TRUE(dev.status.ok()) << dev.status;
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      EXPECT_EQ(dev.logits, cpu.logits) << what;
      ASSERT_EQ(dev.waits.size(), 12u);
      for (size_t i = 1; i < dev.waits.size(); ++i) {  // the first may grow
        EXPECT_EQ(dev.waits[i], (host_planning ? sparse : 0) + 2)
            << what << (host_planning ? " host planning" : "") << " step " << i;
      }
      if (host_planning) {
        EXPECT_EQ(dev.layers_planned, 0) << what;
        continue;
      }
      EXPECT_GT(dev.deferred_calls, 0) << what;
      EXPECT_EQ(dev.list_ops, dev.deferred_calls) << what;
      EXPECT_EQ(dev.layers_planned, dev.deferred_calls) << what;
      std::printf("quest %s: decode step waits %lld, deferred plans %lld\n",
                  what.c_str(), static_cast<long long>(dev.waits.back()),
                  static_cast<long long>(dev.deferred_calls));
    }
  }
}

}  // namespace
}  // namespace ckv
