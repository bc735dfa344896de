// Helpers of the device runtime tests: staging through pinned memory.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/device/fake_runtime.h"
#include "kernels/device/runtime.h"

namespace ckv::kernels::device {

#define CKV_ASSERT_OK(expr)                       \
  do {                                            \
    const absl::Status ckv_status_ = (expr);      \
    ASSERT_TRUE(ckv_status_.ok()) << ckv_status_; \
  } while (0)

inline FakeConfig TestConfig(Schedule s, uint64_t seed, int64_t mib,
                             int max_delay_us) {
  FakeConfig c;
  c.device_bytes = mib << 20;
  c.schedule = s;
  c.seed = seed;
  c.max_delay_us = max_delay_us;
  return c;
}

template <class T>
T ValueOrDie(absl::StatusOr<T> v) {
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : T{};
}

// A pinned buffer holding `data`, and a device buffer the same size filled
// from it on `st` (both owned by the runtime; freed with it).
template <class T>
DevPtr Upload(Runtime& rt, Stream st, const std::vector<T>& data) {
  const int64_t bytes = static_cast<int64_t>(data.size() * sizeof(T));
  void* pinned = ValueOrDie(rt.HostAllocPinned(bytes));
  if (pinned == nullptr) return {};
  EXPECT_TRUE(rt.HostWrite(pinned, bytes).ok());
  std::memcpy(pinned, data.data(), static_cast<size_t>(bytes));
  const DevPtr d = ValueOrDie(rt.Malloc(bytes));
  EXPECT_TRUE(rt.CopyH2D(d, pinned, bytes, st).ok());
  return d;
}

// Copies n elements at d back through pinned memory (synchronises st).
template <class T>
std::vector<T> Download(Runtime& rt, Stream st, DevPtr d, int64_t n) {
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  std::vector<T> out(static_cast<size_t>(n));
  void* pinned = ValueOrDie(rt.HostAllocPinned(bytes));
  if (pinned == nullptr) return out;
  EXPECT_TRUE(rt.CopyD2H(pinned, d, bytes, st).ok());
  EXPECT_TRUE(rt.Synchronize(st).ok());
  EXPECT_TRUE(rt.HostRead(pinned, bytes).ok());
  std::memcpy(out.data(), pinned, static_cast<size_t>(bytes));
  EXPECT_TRUE(rt.HostFree(pinned).ok());
  return out;
}

}  // namespace ckv::kernels::device
