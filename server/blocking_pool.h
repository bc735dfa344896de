// Threads for the work of unary RPCs that may block (snapshot files, session
// restore, tokenizing a large text), so that no gRPC callback waits on disk
// or on long computation. A call is queued without bound: gRPC's own limits
// on concurrent calls bound the queue.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckv::server {

class BlockingPool {
 public:
  // `threads` >= 1 workers, started now.
  explicit BlockingPool(int threads);
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;
  // Runs every task already posted, then joins the workers.
  ~BlockingPool();

  // Queues `task` for a worker thread; false (task not run) once stopping.
  bool Post(std::function<void()> task);
  // True on one of this pool's workers.
  bool OnWorkerThread() const;

 private:
  void Work();

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace ckv::server
