#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ckv::kernels::cpu {
namespace {

class ThreadPoolTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolTest, CoversRangeOnceWithAlignedDisjointRanges) {
  ThreadPool pool(GetParam());
  EXPECT_EQ(pool.size(), GetParam());
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
      EXPECT_LE(calls.load(), GetParam());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n;
    }
  }
}

TEST_P(ThreadPoolTest, ManySmallJobs) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 20000; ++rep) {
    pool.ParallelFor(GetParam() * 2, 1,
                     [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  }
  EXPECT_EQ(sum.load(), int64_t{20000} * GetParam() * 2);
}

TEST_P(ThreadPoolTest, UsesSeveralThreadsAndWakesAfterSleep) {
  ThreadPool pool(GetParam());
  for (int round = 0; round < 2; ++round) {
    std::mutex mu;
    std::set<std::thread::id> ids;
    pool.ParallelFor(GetParam(), 1, [&](int64_t, int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(static_cast<int>(ids.size()), GetParam());
    // Long enough for workers to stop spinning and block.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

TEST_P(ThreadPoolTest, EmptyRangeDoesNothing) {
  ThreadPool pool(GetParam());
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

INSTANTIATE_TEST_SUITE_P(Threads, ThreadPoolTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace ckv::kernels::cpu
