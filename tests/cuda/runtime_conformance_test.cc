// One conformance suite for every device runtime (kernels/device/runtime.h):
// the fake device (runs everywhere, so the suite itself is checked in CI)
// and CudaRuntime (skipped without a CUDA device). What the device backend
// relies on: allocation (also stream-ordered), async copies in stream order,
// pageable copies refused, events ordering two streams, capture and replay
// reading the addresses' contents at replay time, thread-local capture,
// destroyed graphs, out of memory as RESOURCE_EXHAUSTED.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_runtime.h"
#include "kernels/device/fake_runtime.h"

namespace ckv::kernels::device {
namespace {

struct Maker {
  std::string name;
  std::function<absl::StatusOr<std::unique_ptr<Runtime>>()> make;
};

std::vector<Maker> Makers() {
  return {
      {"fake",
       []() -> absl::StatusOr<std::unique_ptr<Runtime>> {
         FakeConfig c;
         c.schedule = Schedule::kThreaded;
         c.device_bytes = 64 << 20;
         c.max_delay_us = 20;
         return std::make_unique<FakeRuntime>(c);
       }},
      {"cuda",
       []() -> absl::StatusOr<std::unique_ptr<Runtime>> {
         auto rt = cuda::CudaRuntime::Create(0);
         if (!rt.ok()) return rt.status();
         return std::unique_ptr<Runtime>(*std::move(rt));
       }},
  };
}

class RuntimeConformance : public ::testing::TestWithParam<Maker> {
 protected:
  void SetUp() override {
    auto rt = GetParam().make();
    if (!rt.ok()) {
      // Only the CUDA runtime may be missing (no device here).
      ASSERT_EQ(GetParam().name, "cuda") << rt.status();
      GTEST_SKIP() << rt.status();
    }
    rt_ = *std::move(rt);
    auto st = rt_->CreateStream(kHighestPriority);
    ASSERT_TRUE(st.ok()) << st.status();
    stream_ = *st;
  }
  void TearDown() override {
    if (rt_ == nullptr) return;
    for (DevPtr p : device_) EXPECT_TRUE(rt_->Free(p).ok());
    for (void* p : pinned_) EXPECT_TRUE(rt_->HostFree(p).ok());
    // The fake also checked every access against stream order.
    if (auto* fake = dynamic_cast<FakeRuntime*>(rt_.get())) {
      EXPECT_TRUE(fake->OrderingStatus().ok()) << fake->OrderingStatus();
    }
  }

  DevPtr Dev(int64_t bytes) {
    auto p = rt_->Malloc(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return DevPtr{};
    device_.push_back(*p);
    return *p;
  }
  char* Pinned(int64_t bytes) {
    auto p = rt_->HostAllocPinned(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    pinned_.push_back(*p);
    return static_cast<char*>(*p);
  }

  std::unique_ptr<Runtime> rt_;
  Stream stream_;
  std::vector<DevPtr> device_;
  std::vector<void*> pinned_;
};

TEST_P(RuntimeConformance, CopiesRoundTripInStreamOrder) {
  constexpr int64_t kBytes = 4096 + 17;
  char* in = Pinned(kBytes);
  char* out = Pinned(kBytes);
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  ASSERT_TRUE(rt_->HostWrite(in, kBytes).ok());
  for (int64_t i = 0; i < kBytes; ++i) in[i] = static_cast<char>(i * 7 + 3);
  const DevPtr a = Dev(kBytes), b = Dev(kBytes);
  ASSERT_TRUE(rt_->CopyH2D(a, in, kBytes, stream_).ok());
  ASSERT_TRUE(rt_->CopyD2D(b, a, kBytes, stream_).ok());
  ASSERT_TRUE(rt_->Memset(a, 0, 100, stream_).ok());  // after the D2D
  ASSERT_TRUE(rt_->CopyD2H(out, b, kBytes, stream_).ok());
  ASSERT_TRUE(rt_->Synchronize(stream_).ok());
  ASSERT_TRUE(rt_->HostRead(out, kBytes).ok());
  EXPECT_EQ(std::memcmp(in, out, kBytes), 0);
  ASSERT_TRUE(rt_->CopyD2H(out, a, 100, stream_).ok());
  ASSERT_TRUE(rt_->Synchronize(stream_).ok());
  ASSERT_TRUE(rt_->HostRead(out, 100).ok());
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[99], 0);
}

// Stream-ordered allocation: rows written, copied and read back between a
// MallocAsync and a FreeAsync on one stream, no synchronisation in
// between; the freed memory serves the next MallocAsync.
TEST_P(RuntimeConformance, StreamOrderedAllocationRoundTrips) {
  constexpr int64_t kBytes = 1000;
  char* in = Pinned(kBytes);
  char* out = Pinned(kBytes);
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  ASSERT_TRUE(rt_->HostWrite(in, kBytes).ok());
  for (int64_t i = 0; i < kBytes; ++i) in[i] = static_cast<char>(i * 5 + 1);
  for (int round = 0; round < 3; ++round) {
    auto a = rt_->MallocAsync(kBytes, stream_);
    auto b = rt_->MallocAsync(kBytes, stream_);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    ASSERT_TRUE(rt_->CopyH2D(*a, in, kBytes, stream_).ok());
    ASSERT_TRUE(rt_->CopyD2D(*b, *a, kBytes, stream_).ok());
    ASSERT_TRUE(rt_->FreeAsync(*a, stream_).ok());
    ASSERT_TRUE(rt_->CopyD2H(out, *b, kBytes, stream_).ok());
    ASSERT_TRUE(rt_->FreeAsync(*b, stream_).ok());
    ASSERT_TRUE(rt_->Synchronize(stream_).ok());
    ASSERT_TRUE(rt_->HostRead(out, kBytes).ok());
    EXPECT_EQ(std::memcmp(in, out, kBytes), 0) << "round " << round;
  }
}

TEST_P(RuntimeConformance, PageableAsyncCopiesAreRefused) {
  const DevPtr a = Dev(64);
  std::vector<char> pageable(64, 1);
  const absl::Status s = rt_->CopyH2D(a, pageable.data(), 64, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(rt_->Synchronize(stream_).ok());
}

// Stream 2 copies what stream 1 wrote, ordered by an event only.
TEST_P(RuntimeConformance, EventsOrderTwoStreams) {
  auto s2 = rt_->CreateStream(kLowestPriority);
  auto ev = rt_->CreateEvent();
  ASSERT_TRUE(s2.ok() && ev.ok());
  constexpr int64_t kBytes = 1 << 16;
  char* in = Pinned(kBytes);
  char* out = Pinned(kBytes);
  ASSERT_TRUE(rt_->HostWrite(in, kBytes).ok());
  std::memset(in, 0x5a, kBytes);
  const DevPtr a = Dev(kBytes);
  ASSERT_TRUE(rt_->CopyH2D(a, in, kBytes, stream_).ok());
  ASSERT_TRUE(rt_->Record(*ev, stream_).ok());
  ASSERT_TRUE(rt_->Wait(*s2, *ev).ok());
  ASSERT_TRUE(rt_->CopyD2H(out, a, kBytes, *s2).ok());
  ASSERT_TRUE(rt_->Synchronize(*s2).ok());
  auto done = rt_->Query(*ev);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  ASSERT_TRUE(rt_->HostRead(out, kBytes).ok());
  EXPECT_EQ(std::memcmp(in, out, kBytes), 0);
}

// A captured copy replays against whatever its source holds then.
TEST_P(RuntimeConformance, ReplayReadsTheAddressesAtReplayTime) {
  char* in = Pinned(256);
  char* out = Pinned(256);
  const DevPtr src = Dev(256), dst = Dev(256);
  ASSERT_TRUE(rt_->Memset(src, 1, 256, stream_).ok());
  ASSERT_TRUE(rt_->BeginCapture(stream_).ok());
  ASSERT_TRUE(rt_->CopyD2D(dst, src, 256, stream_).ok());
  auto graph = rt_->EndCapture(stream_);
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int round = 2; round < 4; ++round) {
    ASSERT_TRUE(rt_->Synchronize(stream_).ok());
    ASSERT_TRUE(rt_->HostWrite(in, 256).ok());
    std::memset(in, round, 256);
    ASSERT_TRUE(rt_->CopyH2D(src, in, 256, stream_).ok());
    ASSERT_TRUE(rt_->Replay(*graph, stream_).ok());
    ASSERT_TRUE(rt_->CopyD2H(out, dst, 256, stream_).ok());
    ASSERT_TRUE(rt_->Synchronize(stream_).ok());
    ASSERT_TRUE(rt_->HostRead(out, 256).ok());
    EXPECT_EQ(out[0], round);
    EXPECT_EQ(out[255], round);
  }
}

// Capture is thread-local (the device backend captures on the engine
// thread while k-means jobs allocate and launch on other threads): another
// thread's allocation neither fails nor breaks the capture. A destroyed
// graph is unknown after.
TEST_P(RuntimeConformance, CaptureIsThreadLocalAndGraphsAreDestroyed) {
  const DevPtr src = Dev(256), dst = Dev(256);
  ASSERT_TRUE(rt_->Memset(src, 3, 256, stream_).ok());
  ASSERT_TRUE(rt_->Synchronize(stream_).ok());
  ASSERT_TRUE(rt_->BeginCapture(stream_).ok());
  ASSERT_TRUE(rt_->CopyD2D(dst, src, 256, stream_).ok());
  absl::StatusOr<DevPtr> other;
  std::thread([&] { other = rt_->Malloc(4096); }).join();
  EXPECT_TRUE(other.ok()) << other.status();
  auto graph = rt_->EndCapture(stream_);
  ASSERT_TRUE(graph.ok()) << graph.status();
  if (other.ok()) {
    EXPECT_TRUE(rt_->Free(*other).ok());
  }
  ASSERT_TRUE(rt_->Replay(*graph, stream_).ok());
  ASSERT_TRUE(rt_->Synchronize(stream_).ok());
  ASSERT_TRUE(rt_->DestroyGraph(*graph).ok());
  EXPECT_FALSE(rt_->Replay(*graph, stream_).ok());
  EXPECT_FALSE(rt_->DestroyGraph(*graph).ok());
}

TEST_P(RuntimeConformance, OutOfMemoryIsResourceExhausted) {
  const int64_t too_much = rt_->Info().total_bytes + (int64_t{1} << 30);
  auto p = rt_->Malloc(too_much);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted)
      << p.status();
}

INSTANTIATE_TEST_SUITE_P(Runtimes, RuntimeConformance,
                         ::testing::ValuesIn(Makers()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ckv::kernels::device
