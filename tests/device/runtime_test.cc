// FakeRuntime as a test instrument: each check catches its planted bug,
// and the three schedules give bit-identical results on a multi-stream
// workload (and a missing wait changes them).
#include "kernels/device/fake_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/device/phases.h"
#include "tests/device/test_util.h"

namespace ckv::kernels::device {
namespace {

using ::testing::HasSubstr;

FakeConfig Config(Schedule s, uint64_t seed = 1) {
  return TestConfig(s, seed, 16, 100);
}

// out[i] = in[i] * 0.5 + bias[i], one device thread per element.
Op AffineOp(DevPtr in, DevPtr bias, DevPtr out, int64_t n) {
  Op op;
  op.name = "affine";
  op.reads = {{in, n * 4}, {bias, n * 4}};
  op.writes = {{out, n * 4}};
  op.body = [=](OpContext& ctx) {
    const float* x = ctx.In<float>(in, n);
    const float* b = ctx.In<float>(bias, n);
    float* y = ctx.Out<float>(out, n);
    ctx.Phase(n, [&](int64_t i) { y[i] = x[i] * 0.5f + b[i]; });
  };
  return op;
}

struct Workload {
  int n_q = 4, dim = 67;
  int64_t n = 37;
  std::vector<float> q, bias;
  std::vector<uint16_t> panels;
  Workload() {
    std::mt19937 rng(7);
    std::normal_distribution<float> g;
    q.resize(n_q * dim);
    bias.resize(n_q * n);
    std::vector<float> mu(n * dim);
    for (float& x : q) x = g(rng);
    for (float& x : bias) x = g(rng);
    for (float& x : mu) x = g(rng);
    cpu::PackCentroidPanels(mu.data(), n, dim, &panels);
  }
};

// Stream A (high priority) uploads and scores; stream B waits for A's event
// (unless `wait` is false: the planted bug), transforms, copies D2D and
// downloads. Returns the downloaded bytes.
std::vector<float> RunWorkload(FakeRuntime& rt, const Workload& w, bool wait) {
  const Stream a = ValueOrDie(rt.CreateStream(kHighestPriority));
  const Stream b = ValueOrDie(rt.CreateStream(kLowestPriority));
  const Event ready = ValueOrDie(rt.CreateEvent());
  const DevPtr q = Upload(rt, a, w.q);
  const DevPtr panels = Upload(rt, a, w.panels);
  const DevPtr bias = Upload(rt, b, w.bias);
  const int64_t m = w.n_q * w.n;
  const DevPtr scores = ValueOrDie(rt.Malloc(m * 4));
  const DevPtr y = ValueOrDie(rt.Malloc(m * 4));
  const DevPtr y2 = ValueOrDie(rt.Malloc(m * 4));
  EXPECT_TRUE(
      rt.Launch(ScoreClustersOp({q, w.n_q, panels, w.n, w.dim, scores, w.n}), a)
          .ok());
  EXPECT_TRUE(rt.Record(ready, a).ok());
  if (wait) {
    EXPECT_TRUE(rt.Wait(b, ready).ok());
  }
  EXPECT_TRUE(rt.Launch(AffineOp(scores, bias, y, m), b).ok());
  EXPECT_TRUE(rt.CopyD2D(y2, y, m * 4, b).ok());
  void* out = ValueOrDie(rt.HostAllocPinned(m * 4));
  EXPECT_TRUE(rt.CopyD2H(out, y2, m * 4, b).ok());
  EXPECT_TRUE(rt.Synchronize(b).ok());
  EXPECT_TRUE(rt.HostRead(out, m * 4).ok());
  std::vector<float> result(m);
  std::memcpy(result.data(), out, m * 4);
  EXPECT_TRUE(rt.SynchronizeDevice().ok());
  return result;
}

std::vector<float> Expected(const Workload& w) {
  std::vector<float> s(w.n_q * w.n), y(s.size());
  cpu::CentroidScoresMulti(w.q.data(), w.n_q, w.panels.data(), w.n, w.dim,
                           s.data(), w.n);
  for (size_t i = 0; i < s.size(); ++i) y[i] = s[i] * 0.5f + w.bias[i];
  return y;
}

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() &&
         std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
}

TEST(FakeRuntimeTest, SchedulesGiveBitIdenticalResults) {
  const Workload w;
  const std::vector<float> want = Expected(w);
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    for (uint64_t seed : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << ScheduleName(s) << " seed " << seed);
      FakeRuntime rt(Config(s, seed));
      CKV_ASSERT_OK(rt.init_status());
      EXPECT_TRUE(SameBits(RunWorkload(rt, w, true), want));
      EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
      EXPECT_GT(rt.ops_run(), 5);
    }
  }
}

TEST(FakeRuntimeTest, MissingEventWaitIsReportedAsRace) {
  const Workload w;
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    SCOPED_TRACE(ScheduleName(s));
    FakeRuntime rt(Config(s));
    const std::vector<float> got = RunWorkload(rt, w, false);
    const absl::Status order = rt.OrderingStatus();
    EXPECT_TRUE(absl::IsFailedPrecondition(order));
    EXPECT_THAT(std::string(order.message()), HasSubstr("score_clusters"));
    EXPECT_THAT(std::string(order.message()), HasSubstr("affine"));
    EXPECT_THAT(std::string(order.message()), HasSubstr("runtime_test.cc"));
    // Lazy runs stream A only when forced: B read poisoned scores.
    if (s == Schedule::kLazy) {
      EXPECT_FALSE(SameBits(got, Expected(w)));
      EXPECT_TRUE(std::isnan(got[0]));
    }
  }
}

TEST(FakeRuntimeTest, HostReadOfDevicePointerIsAnError) {
  FakeRuntime rt(Config(Schedule::kInline));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr d = ValueOrDie(rt.Malloc(64));
  const void* as_host = reinterpret_cast<const void*>(d.addr);
  const absl::Status read = rt.HostRead(as_host, 64);
  EXPECT_TRUE(absl::IsInvalidArgument(read));
  EXPECT_THAT(std::string(read.message()), HasSubstr("device address"));
  // A device address passed as the host side of a copy.
  const absl::Status copy = rt.CopyH2D(d, as_host, 64, st);
  EXPECT_TRUE(absl::IsInvalidArgument(copy));
  EXPECT_THAT(std::string(copy.message()), HasSubstr("is a device address"));
  EXPECT_FALSE(rt.MappedPointer(as_host).ok());
}

TEST(FakeRuntimeDeathTest, HostDereferenceOfDevicePointerFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FakeRuntime rt(Config(Schedule::kInline));
        const DevPtr d = ValueOrDie(rt.Malloc(64));
        volatile const char* p = reinterpret_cast<const char*>(d.addr);
        std::printf("%d\n", p[0]);
      },
      "");
}

TEST(FakeRuntimeTest, PageableAsyncCopyIsRejected) {
  FakeRuntime rt(Config(Schedule::kInline));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr d = ValueOrDie(rt.Malloc(256));
  std::vector<char> pageable(256, 1);
  const absl::Status h2d = rt.CopyH2D(d, pageable.data(), 256, st);
  EXPECT_TRUE(absl::IsInvalidArgument(h2d));
  EXPECT_THAT(std::string(h2d.message()), HasSubstr("pageable"));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.CopyD2H(pageable.data(), d, 256, st)));
  // Pinned works; past the end of the pinned buffer does not.
  void* pinned = ValueOrDie(rt.HostAllocPinned(256));
  CKV_ASSERT_OK(rt.CopyH2D(d, pinned, 256, st));
  EXPECT_FALSE(rt.CopyH2D(d, pinned, 512, st).ok());
  EXPECT_TRUE(absl::IsOutOfRange(rt.HostRead(pinned, 512)));
}

TEST(FakeRuntimeTest, AllocationInsideCaptureIsRejected) {
  FakeRuntime rt(Config(Schedule::kInline));
  const Stream st = ValueOrDie(rt.CreateStream());
  CKV_ASSERT_OK(rt.BeginCapture(st));
  const absl::StatusOr<DevPtr> d = rt.Malloc(64);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status()));
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("capture"));
  const absl::StatusOr<Graph> g = rt.EndCapture(st);
  EXPECT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("invalidated"));
  // Synchronisation and queries are refused there too.
  CKV_ASSERT_OK(rt.BeginCapture(st));
  EXPECT_FALSE(rt.Synchronize(st).ok());
  const Event e = ValueOrDie(rt.CreateEvent());
  EXPECT_FALSE(rt.Query(e).ok());
  EXPECT_FALSE(rt.EndCapture(st).ok());
}

TEST(FakeRuntimeTest, ReplayRunsTheCapturedOpsOnNewContents) {
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    SCOPED_TRACE(ScheduleName(s));
    FakeRuntime rt(Config(s));
    const Stream st = ValueOrDie(rt.CreateStream());
    constexpr int64_t n = 33;
    float* plan = static_cast<float*>(ValueOrDie(rt.HostAllocPinned(n * 4)));
    float* out = static_cast<float*>(ValueOrDie(rt.HostAllocPinned(n * 4)));
    const DevPtr x = ValueOrDie(rt.Malloc(n * 4));
    const DevPtr bias = Upload(rt, st, std::vector<float>(n, 1.0f));
    const DevPtr y = ValueOrDie(rt.Malloc(n * 4));
    CKV_ASSERT_OK(rt.SynchronizeDevice());
    const int64_t before = rt.ops_run();
    CKV_ASSERT_OK(rt.BeginCapture(st));
    CKV_ASSERT_OK(rt.CopyH2D(x, plan, n * 4, st));
    CKV_ASSERT_OK(rt.Launch(AffineOp(x, bias, y, n), st));
    CKV_ASSERT_OK(rt.CopyD2H(out, y, n * 4, st));
    const Graph g = ValueOrDie(rt.EndCapture(st));
    EXPECT_EQ(rt.ops_run(), before);  // captured, not run
    for (int round = 0; round < 3; ++round) {
      CKV_ASSERT_OK(rt.HostWrite(plan, n * 4));
      for (int i = 0; i < n; ++i) plan[i] = float(i * (round + 1));
      CKV_ASSERT_OK(rt.Replay(g, st));
      CKV_ASSERT_OK(rt.Synchronize(st));
      CKV_ASSERT_OK(rt.HostRead(out, n * 4));
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], float(i * (round + 1)) * 0.5f + 1.0f) << i;
      }
    }
    EXPECT_EQ(rt.ops_run(), before + 9);
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
  }
}

TEST(FakeRuntimeTest, UseAfterFreeIsDetected) {
  FakeRuntime rt(Config(Schedule::kLazy));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr in = ValueOrDie(rt.Malloc(128));
  const DevPtr bias = ValueOrDie(rt.Malloc(128));
  const DevPtr out = ValueOrDie(rt.Malloc(128));
  CKV_ASSERT_OK(rt.Free(in));
  const absl::Status use = rt.Launch(AffineOp(in, bias, out, 32), st);
  EXPECT_TRUE(absl::IsFailedPrecondition(use));
  EXPECT_THAT(std::string(use.message()), HasSubstr("use after free"));
  EXPECT_THAT(std::string(use.message()), HasSubstr("freed at"));
  const absl::Status twice = rt.Free(in);
  EXPECT_THAT(std::string(twice.message()), HasSubstr("double free"));
  // Quarantined: the next allocation does not get the freed address.
  const DevPtr again = ValueOrDie(rt.Malloc(128));
  EXPECT_NE(again.addr, in.addr);
  // Out of bounds of a live allocation.
  EXPECT_TRUE(absl::IsOutOfRange(rt.CopyD2D(out, bias, 4096, st)));
}

// Stream-ordered allocation: work enqueued before a FreeAsync still runs
// on the memory (lazy: nothing has run yet when the free is enqueued);
// work named after it is use after free; the two kinds of allocation do
// not mix; another stream that touches the memory without an event is a
// race, with one it is not.
TEST(FakeRuntimeTest, StreamOrderedAllocation) {
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    SCOPED_TRACE(ScheduleName(s));
    FakeRuntime rt(Config(s));
    const Stream a = ValueOrDie(rt.CreateStream());
    const Stream b = ValueOrDie(rt.CreateStream());
    const DevPtr bias = ValueOrDie(rt.Malloc(128));
    const DevPtr out = ValueOrDie(rt.Malloc(128));
    const DevPtr in = ValueOrDie(rt.MallocAsync(128, a));
    CKV_ASSERT_OK(rt.Memset(in, 0, 128, a));
    CKV_ASSERT_OK(rt.Memset(bias, 0, 128, a));
    CKV_ASSERT_OK(rt.Launch(AffineOp(in, bias, out, 32), a));
    CKV_ASSERT_OK(rt.FreeAsync(in, a));
    const absl::Status use = rt.Launch(AffineOp(in, bias, out, 32), a);
    EXPECT_THAT(std::string(use.message()), HasSubstr("use after free"));
    EXPECT_THAT(std::string(rt.FreeAsync(in, a).message()),
                HasSubstr("double free"));
    CKV_ASSERT_OK(rt.Synchronize(a));
    EXPECT_TRUE(rt.OrderingStatus().ok()) << rt.OrderingStatus();
    float host[32];
    void* pinned = ValueOrDie(rt.HostAllocPinned(128));
    CKV_ASSERT_OK(rt.CopyD2H(pinned, out, 128, a));
    CKV_ASSERT_OK(rt.Synchronize(a));
    CKV_ASSERT_OK(rt.HostRead(pinned, 128));
    std::memcpy(host, pinned, 128);
    EXPECT_EQ(host[0], 0.0f);  // 0 * 0.5 + 0: the op read the live memory
    // Kinds do not mix.
    const DevPtr plain = ValueOrDie(rt.Malloc(64));
    EXPECT_TRUE(absl::IsInvalidArgument(rt.FreeAsync(plain, a)));
    // Stream b uses a's allocation unordered: a race (with an event: below).
    const DevPtr async = ValueOrDie(rt.MallocAsync(64, a));
    CKV_ASSERT_OK(rt.Memset(async, 1, 64, b));
    EXPECT_TRUE(absl::IsFailedPrecondition(rt.OrderingStatus()));
    EXPECT_TRUE(absl::IsInvalidArgument(rt.Free(async)));
    FakeRuntime ordered(Config(s));
    const Stream a2 = ValueOrDie(ordered.CreateStream());
    const Stream b2 = ValueOrDie(ordered.CreateStream());
    const Event made2 = ValueOrDie(ordered.CreateEvent());
    const DevPtr p = ValueOrDie(ordered.MallocAsync(64, a2));
    CKV_ASSERT_OK(ordered.Record(made2, a2));
    CKV_ASSERT_OK(ordered.Wait(b2, made2));
    CKV_ASSERT_OK(ordered.Memset(p, 1, 64, b2));
    CKV_ASSERT_OK(ordered.Record(made2, b2));
    CKV_ASSERT_OK(ordered.Wait(a2, made2));
    CKV_ASSERT_OK(ordered.FreeAsync(p, a2));
    CKV_ASSERT_OK(ordered.Synchronize(a2));
    EXPECT_TRUE(ordered.OrderingStatus().ok()) << ordered.OrderingStatus();
    CKV_ASSERT_OK(rt.Synchronize(b));
  }
}

TEST(FakeRuntimeTest, OutOfDeviceMemoryIsResourceExhausted) {
  FakeConfig c = Config(Schedule::kInline);
  c.device_bytes = int64_t{1} << 20;
  FakeRuntime rt(c);
  EXPECT_EQ(rt.Info().total_bytes, int64_t{1} << 20);
  const absl::StatusOr<DevPtr> big = rt.Malloc(int64_t{2} << 20);
  EXPECT_TRUE(absl::IsResourceExhausted(big.status()));
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("out of memory"));
  std::vector<DevPtr> held;
  for (int i = 0; i < 4; ++i) held.push_back(ValueOrDie(rt.Malloc(256 << 10)));
  EXPECT_EQ(rt.Info().free_bytes, 0);
  EXPECT_TRUE(absl::IsResourceExhausted(rt.Malloc(1).status()));
  // Freed memory comes back (from quarantine when nothing else is left).
  CKV_ASSERT_OK(rt.Free(held[1]));
  EXPECT_TRUE(rt.Malloc(256 << 10).ok());
}

TEST(FakeRuntimeTest, FreshAllocationsArePoisoned) {
  FakeRuntime rt(Config(Schedule::kInline));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr d = ValueOrDie(rt.Malloc(64 * 4));
  for (float x : Download<float>(rt, st, d, 64)) EXPECT_TRUE(std::isnan(x));
  CKV_ASSERT_OK(rt.Memset(d, 0, 64 * 4, st));
  for (float x : Download<float>(rt, st, d, 64)) EXPECT_EQ(x, 0.0f);
}

TEST(FakeRuntimeTest, UndeclaredAccessFailsTheNextSync) {
  FakeRuntime rt(Config(Schedule::kThreaded));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr a = ValueOrDie(rt.Malloc(64));
  const DevPtr b = ValueOrDie(rt.Malloc(64));
  Op op;
  op.name = "sneaky";
  op.writes = {{a, 64}};
  op.body = [=](OpContext& ctx) {
    ctx.Out<char>(a, 64)[0] = ctx.In<char>(b, 64)[0];  // b not declared
  };
  CKV_ASSERT_OK(rt.Launch(std::move(op), st));
  const absl::Status sync = rt.Synchronize(st);
  EXPECT_TRUE(absl::IsFailedPrecondition(sync));
  EXPECT_THAT(std::string(sync.message()), HasSubstr("did not declare"));
}

// An op with many declared ranges (a batch's items; the fake indexes
// them): each access maps through the first range that holds it — a read
// range is not writable, a range declared again is the same range, an
// access across two items is held by the long range over all of them.
TEST(FakeRuntimeTest, ManyDeclaredRangesMapAsFew) {
  for (const bool write_read_only : {false, true}) {
    FakeRuntime rt(Config(Schedule::kInline));
    const Stream st = ValueOrDie(rt.CreateStream());
    const DevPtr in = ValueOrDie(rt.Malloc(64 * 100));
    const DevPtr out = ValueOrDie(rt.Malloc(64));
    Op op;
    op.name = "many";
    for (int i = 0; i < 100; ++i) op.reads.push_back({in + 64 * i, 64});
    for (int i = 0; i < 100; ++i) op.reads.push_back({in + 64 * i, 64});
    op.reads.push_back({in, 64 * 100});  // long: holds every item too
    op.writes = {{out, 64}, {in + 64 * 7, 64}};
    op.body = [=](OpContext& ctx) {
      char* o = ctx.Out<char>(out, 64);
      for (int i = 0; i < 100; ++i)
        o[i % 64] ^= ctx.In<char>(in + 64 * i, 64)[1];
      ctx.Out<char>(in + 64 * 7 + 8, 8)[0] = 1;       // declared as written too
      o[0] ^= ctx.In<char>(in + 64 * 3 + 32, 64)[0];  // items 3 and 4
      if (write_read_only) ctx.Out<char>(in + 64 * 8, 8)[0] = 1;
    };
    CKV_ASSERT_OK(rt.Launch(std::move(op), st));
    const absl::Status sync = rt.Synchronize(st);
    if (!write_read_only) {
      EXPECT_TRUE(sync.ok()) << sync;
    } else {
      EXPECT_TRUE(absl::IsFailedPrecondition(sync));
      EXPECT_THAT(std::string(sync.message()), HasSubstr("did not declare"));
    }
  }
}

TEST(FakeRuntimeTest, HostReadOfPinnedBeforeSyncIsARace) {
  FakeRuntime rt(Config(Schedule::kInline));
  const Stream st = ValueOrDie(rt.CreateStream());
  const DevPtr d = ValueOrDie(rt.Malloc(64));
  void* pinned = ValueOrDie(rt.HostAllocPinned(64));
  CKV_ASSERT_OK(rt.CopyD2H(pinned, d, 64, st));
  CKV_ASSERT_OK(rt.HostRead(pinned, 64));  // no sync: the bug
  EXPECT_EQ(rt.race_count(), 1);
  EXPECT_THAT(std::string(rt.OrderingStatus().message()), HasSubstr("host"));
  const Event e = ValueOrDie(rt.CreateEvent());
  CKV_ASSERT_OK(rt.CopyD2H(pinned, d, 64, st));
  CKV_ASSERT_OK(rt.Record(e, st));
  CKV_ASSERT_OK(rt.Synchronize(e));
  CKV_ASSERT_OK(rt.HostRead(pinned, 64));  // ordered by the event
  EXPECT_EQ(rt.race_count(), 1);
}

TEST(FakeRuntimeTest, BadArgumentsAreErrors) {
  FakeRuntime rt(Config(Schedule::kInline));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.CreateStream(1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.Malloc(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.Synchronize(Stream{7})));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.Wait(Stream{0}, Event{3})));
  EXPECT_TRUE(absl::IsInvalidArgument(rt.Free(DevPtr{12345})));
  FakeConfig c;
  c.device_bytes = 0;
  EXPECT_FALSE(FakeRuntime(c).init_status().ok());
}

// Phase threads run in a seeded order: a permutation, the same for the same
// seed under every schedule, different for another seed (so an
// order-dependent phase shows up as a changed answer).
std::vector<int32_t> PhaseOrder(Schedule s, uint64_t seed) {
  FakeRuntime rt(Config(s, seed));
  const Stream st = ValueOrDie(rt.CreateStream());
  constexpr int64_t n = 64;
  const DevPtr d = ValueOrDie(rt.Malloc(n * 4));
  Op op;
  op.name = "order";
  op.writes = {{d, n * 4}};
  op.body = [d](OpContext& ctx) {
    int32_t* out = ctx.Out<int32_t>(d, n);
    int32_t next = 0;
    ctx.Phase(n, [&](int64_t t) { out[next++] = static_cast<int32_t>(t); });
  };
  EXPECT_TRUE(rt.Launch(std::move(op), st).ok());
  return Download<int32_t>(rt, st, d, n);
}

TEST(FakeRuntimeTest, PhasesRunInASeededRandomOrder) {
  const std::vector<int32_t> a = PhaseOrder(Schedule::kInline, 1);
  std::vector<int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t i = 0; i < 64; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_FALSE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(PhaseOrder(Schedule::kLazy, 1), a);
  EXPECT_EQ(PhaseOrder(Schedule::kThreaded, 1), a);
  EXPECT_NE(PhaseOrder(Schedule::kInline, 2), a);
}

}  // namespace
}  // namespace ckv::kernels::device
