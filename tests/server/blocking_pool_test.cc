// BlockingPool: where the service's unary RPCs run.
#include "server/blocking_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

namespace ckv::server {
namespace {

TEST(BlockingPoolTest, TasksRunOnWorkersNotOnThePostingThread) {
  BlockingPool pool(2);
  EXPECT_FALSE(pool.OnWorkerThread());
  std::promise<std::thread::id> ran_on;
  std::promise<bool> on_worker;
  ASSERT_TRUE(pool.Post([&] {
    ran_on.set_value(std::this_thread::get_id());
    on_worker.set_value(pool.OnWorkerThread());
  }));
  EXPECT_NE(ran_on.get_future().get(), std::this_thread::get_id());
  EXPECT_TRUE(on_worker.get_future().get());
}

// A task that blocks does not hold up the others while a worker is free.
TEST(BlockingPoolTest, ABlockedTaskDoesNotStopTheOthers) {
  BlockingPool pool(2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_TRUE(pool.Post([released] { released.wait(); }));
  std::promise<void> done;
  ASSERT_TRUE(pool.Post([&] { done.set_value(); }));
  done.get_future().wait();  // hangs (test timeout) if the pool serialised
  release.set_value();
}

// Destruction runs every task already posted, from many threads at once.
TEST(BlockingPoolTest, DestructorRunsEveryPostedTask) {
  std::atomic<int> ran{0};
  constexpr int kPosters = 4, kPerPoster = 250;
  {
    BlockingPool pool(3);
    std::vector<std::thread> posters;
    for (int p = 0; p < kPosters; ++p) {
      posters.emplace_back([&] {
        for (int i = 0; i < kPerPoster; ++i) {
          EXPECT_TRUE(pool.Post([&] { ran.fetch_add(1); }));
        }
      });
    }
    for (auto& t : posters) t.join();
  }
  EXPECT_EQ(ran.load(), kPosters * kPerPoster);
}

}  // namespace
}  // namespace ckv::server
