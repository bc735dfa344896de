// ThreadPool: workers spin on a generation counter for a short while after
// each job (decode calls ParallelFor ~30 times per token), then block on a
// condition variable. Every worker acknowledges every job, so a job's state
// is never overwritten while a worker may still read it.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ckv::kernels::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Iterations of the spin loops (~50-100 us) before blocking / yielding.
constexpr int kSpinIters = 20000;
// Spinners yield the core this often, so that an oversubscribed pool (more
// threads than cores) still makes progress quickly.
constexpr int kYieldEvery = 256;

// One step of a spin-wait loop.
inline void SpinStep(int i) {
  if (i % kYieldEvery == kYieldEvery - 1) {
    std::this_thread::yield();
  } else {
    CpuRelax();
  }
}

}  // namespace

struct ThreadPool::Impl {
  // Current job; written by the caller before bumping `generation`.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // elements per range (a multiple of grain)
  int ranges = 0;

  std::atomic<uint64_t> generation{0};
  std::atomic<int> pending{0};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> workers;

  void RunRange(int index) const {
    if (index >= ranges) return;
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(begin, end);
  }

  // Waits until `generation` differs from `seen`; returns the new value.
  uint64_t AwaitGeneration(uint64_t seen) {
    for (int i = 0; i < kSpinIters; ++i) {
      const uint64_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
      SpinStep(i);
    }
    std::unique_lock<std::mutex> lock(mu);
    sleepers.fetch_add(1);
    cv.wait(lock, [&] { return generation.load() != seen; });
    sleepers.fetch_sub(1);
    return generation.load();
  }

  void WorkerLoop(int index) {
    uint64_t seen = 0;
    for (;;) {
      seen = AwaitGeneration(seen);
      if (stop.load(std::memory_order_acquire)) return;
      RunRange(index);
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  // Publishes the job to all workers (seq_cst pairs with AwaitGeneration).
  void Publish() {
    pending.store(static_cast<int>(workers.size()));
    generation.fetch_add(1);
    if (sleepers.load() > 0) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
  }

  void AwaitWorkers() {
    for (int i = 0; pending.load(std::memory_order_acquire) != 0; ++i) {
      SpinStep(std::min(i, kSpinIters));
    }
  }
};

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), impl_(new Impl) {
  for (int i = 1; i < n_threads_; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true);
  impl_->Publish();
  for (std::thread& t : impl_->workers) t.join();
  delete impl_;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t chunks = (n + grain - 1) / grain;
  const int ranges = static_cast<int>(std::min<int64_t>(n_threads_, chunks));
  if (ranges <= 1) {
    fn(0, n);
    return;
  }
  Impl& im = *impl_;
  im.fn = &fn;
  im.n = n;
  im.chunk = (chunks + ranges - 1) / ranges * grain;
  im.ranges = ranges;
  im.Publish();
  im.RunRange(0);
  im.AwaitWorkers();
}

}  // namespace ckv::kernels::cpu
