#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace ckv::kernels::cpu {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// The ranges one ParallelFor call handed out, sorted.
Ranges RangesOf(ThreadPool& pool, int64_t n, int64_t grain) {
  std::mutex mu;
  Ranges out;
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    out.emplace_back(b, e);
  });
  std::sort(out.begin(), out.end());
  return out;
}

class ThreadPoolTest
    : public ::testing::TestWithParam<std::tuple<int, PoolSchedule>> {
 protected:
  int threads() const { return std::get<0>(GetParam()); }
  PoolSchedule schedule() const { return std::get<1>(GetParam()); }
};

TEST_P(ThreadPoolTest, CoversRangeOnceWithAlignedDisjointRanges) {
  ThreadPool pool(threads(), schedule());
  EXPECT_EQ(pool.size(), threads());
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 1001}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        calls.fetch_add(1);
        EXPECT_EQ(b % grain, 0);
        EXPECT_LT(b, e);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      // Static: one range per thread; dynamic: at most 8 per thread.
      const int per_thread = schedule() == PoolSchedule::kStatic ? 1 : 8;
      EXPECT_LE(calls.load(), per_thread * threads());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n;
    }
  }
}

// Results must not depend on timing: the same call cuts the same ranges
// whichever threads happen to run them.
TEST_P(ThreadPoolTest, RangesDoNotDependOnTiming) {
  ThreadPool pool(threads(), schedule());
  for (int64_t n : {5, 100, 2048, 4099}) {
    const Ranges first = RangesOf(pool, n, 16);
    for (int rep = 0; rep < 20; ++rep) {
      if (rep % 5 == 4)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      EXPECT_EQ(RangesOf(pool, n, 16), first) << n;
    }
  }
}

TEST_P(ThreadPoolTest, ManySmallJobs) {
  ThreadPool pool(threads(), schedule());
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 5000; ++rep) {
    pool.ParallelFor(threads() * 2, 1,
                     [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), int64_t{5000} * threads() * 2);
}

TEST_P(ThreadPoolTest, UsesSeveralThreadsAndWakesAfterSleep) {
  ThreadPool pool(threads(), schedule());
  for (int round = 0; round < 2; ++round) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    // Chunks long enough (5 ms) that every woken worker gets some.
    pool.ParallelFor(8 * threads(), 1, [&](int64_t, int64_t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    EXPECT_EQ(static_cast<int>(ids.size()), threads());
    // Long enough for workers to stop spinning and block.
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
}

TEST_P(ThreadPoolTest, EmptyRangeDoesNothing) {
  ThreadPool pool(threads(), schedule());
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

INSTANTIATE_TEST_SUITE_P(
    Threads, ThreadPoolTest,
    ::testing::Combine(::testing::Values(1, 2, 3),
                       ::testing::Values(PoolSchedule::kDynamic,
                                         PoolSchedule::kStatic)));

// A worker that stalls (here: sleeps in its first chunk, as a descheduled
// thread would) holds one chunk; the caller runs every other chunk instead
// of waiting for the worker's fixed share. Under the static schedule the
// caller would run 1 of 2 ranges.
TEST(ThreadPoolDynamicTest, CallerAbsorbsAStalledWorkersShare) {
  ThreadPool pool(2, PoolSchedule::kDynamic);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> stalled{false};
  std::atomic<int> caller_chunks{0}, chunks{0};
  pool.ResetStats();
  pool.ParallelFor(16, 1, [&](int64_t, int64_t) {
    chunks.fetch_add(1);
    if (std::this_thread::get_id() == caller) {
      caller_chunks.fetch_add(1);
      // Give the worker time to claim a chunk before the caller takes all.
      if (caller_chunks.load() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } else if (!stalled.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  EXPECT_EQ(chunks.load(), 16);
  EXPECT_TRUE(stalled.load());
  EXPECT_EQ(caller_chunks.load(), 15);
  const ThreadPoolStats s = pool.stats();
  EXPECT_EQ(s.jobs, 1);
  EXPECT_EQ(s.chunks, 16);
  EXPECT_EQ(s.caller_chunks, 15);
  EXPECT_EQ(s.caller_sleeps, 1);  // waited ~280 ms: blocked, did not spin
  EXPECT_GT(s.caller_wait_ns, 100'000'000);
}

TEST(ThreadPoolDynamicTest, DefaultScheduleAppliesToNewPools) {
  EXPECT_EQ(DefaultPoolSchedule(), PoolSchedule::kDynamic);
  SetDefaultPoolSchedule(PoolSchedule::kStatic);
  ThreadPool pool(2);
  SetDefaultPoolSchedule(PoolSchedule::kDynamic);
  EXPECT_EQ(pool.schedule(), PoolSchedule::kStatic);
  EXPECT_EQ(ThreadPool(2).schedule(), PoolSchedule::kDynamic);
}

}  // namespace
}  // namespace ckv::kernels::cpu
