#include "server/blocking_pool.h"

#include <algorithm>
#include <utility>

namespace ckv::server {

BlockingPool::BlockingPool(int threads) {
  const int n = std::max(1, threads);
  workers_.reserve(n);
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Work(); });
}

BlockingPool::~BlockingPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : workers_) t.join();
}

bool BlockingPool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

bool BlockingPool::OnWorkerThread() const {
  const auto self = std::this_thread::get_id();
  return std::any_of(workers_.begin(), workers_.end(),
                     [&](const std::thread& t) { return t.get_id() == self; });
}

void BlockingPool::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace ckv::server
