// A fixed pool of worker threads for data-parallel loops. The calling thread
// takes part in the work, so ThreadPool(1) runs everything inline.
#pragma once

#include <cstdint>
#include <functional>

namespace ckv::kernels::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), at most one
  // range per thread, ranges aligned to `grain`. Returns when all are done.
  // Not reentrant: fn must not call ParallelFor on the same pool.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  int n_threads_;
  Impl* impl_;
};

}  // namespace ckv::kernels::cpu
