// ThreadPool. One word, `ticket`, carries the current job: its generation
// (high 32 bits), whether it is scheduled statically (1 bit), its number
// of chunks (15 bits) and the next unclaimed chunk (low 16 bits). A thread
// claims a chunk with a compare-and-swap on the whole word, so a claim can only
// succeed for the job it read. The job's other fields (fn, n, chunk size) are
// read only after a successful claim: the caller cannot finish that job, and so
// cannot overwrite them, before the claimed chunk is done. Workers therefore
// need not acknowledge a job; one that wakes late finds nothing left and waits
// for the next.
//
// Waits: a worker spins for a new generation (~50-100 us, yielding the
// core now and then), then blocks on a condition variable. The caller
// spins for the chunks others hold for kCallerSpinNanos, then blocks on
// `done` (a futex), so that its core goes idle and the kernel can run a
// descheduled worker there instead of the caller spinning beside it.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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

// Iterations of a worker's spin for the next job (~50-100 us) before it
// blocks.
constexpr int kSpinIters = 20000;
// Spinners yield the core this often, so that an oversubscribed pool (more
// threads than cores) still makes progress quickly.
constexpr int kYieldEvery = 256;
// The caller's spin for the other threads' chunks before it blocks.
constexpr int64_t kCallerSpinNanos = 50000;
// Dynamic schedule: chunks per thread (at most; at least `grain` each).
// More chunks let the running threads absorb more of a missing one's share;
// each costs one compare-and-swap.
constexpr int64_t kChunksPerThread = 8;
constexpr int64_t kMaxChunks = 0x7fff;
constexpr uint64_t kStaticBit = uint64_t{1} << 31;

std::atomic<PoolSchedule> g_default_schedule{PoolSchedule::kDynamic};

inline void SpinStep(int i) {
  if (i % kYieldEvery == kYieldEvery - 1) {
    std::this_thread::yield();
  } else {
    CpuRelax();
  }
}

inline uint32_t Generation(uint64_t t) {
  return static_cast<uint32_t>(t >> 32);
}
inline int Total(uint64_t t) { return static_cast<int>((t >> 16) & 0x7fff); }
inline bool IsStatic(uint64_t t) { return (t & kStaticBit) != 0; }
inline int Next(uint64_t t) { return static_cast<int>(t & 0xffff); }

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void SetDefaultPoolSchedule(PoolSchedule schedule) {
  g_default_schedule.store(schedule);
}
PoolSchedule DefaultPoolSchedule() { return g_default_schedule.load(); }

struct ThreadPool::Impl {
  // The current job; written by the caller before it publishes `ticket`.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // elements per chunk (a multiple of grain)

  std::atomic<uint64_t> ticket{0};
  std::atomic<int> done{0};  // chunks of the current job finished
  std::atomic<bool> caller_sleeping{false};
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> workers;
  ThreadPoolStats stats;  // written by the caller only

  void RunChunk(int index) const {
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(begin, end);
  }

  // Marks one chunk of a job of `total` chunks done.
  void FinishChunk(int total) {
    if (done.fetch_add(1) + 1 == total && caller_sleeping.load()) {
      done.notify_one();
    }
  }

  // Claims the next chunk of generation `gen`; false when none is left.
  bool Claim(uint32_t gen, int* index) {
    uint64_t t = ticket.load(std::memory_order_acquire);
    while (Generation(t) == gen && Next(t) < Total(t)) {
      if (ticket.compare_exchange_weak(t, t + 1)) {
        *index = Next(t);
        return true;
      }
    }
    return false;
  }

  // Waits until the generation differs from `seen`; returns the ticket.
  uint64_t AwaitGeneration(uint32_t seen) {
    for (int i = 0; i < kSpinIters; ++i) {
      const uint64_t t = ticket.load(std::memory_order_acquire);
      if (Generation(t) != seen) return t;
      SpinStep(i);
    }
    std::unique_lock<std::mutex> lock(mu);
    sleepers.fetch_add(1);
    cv.wait(lock, [&] { return Generation(ticket.load()) != seen; });
    sleepers.fetch_sub(1);
    return ticket.load();
  }

  void WorkerLoop(int index) {
    uint32_t seen = 0;
    for (;;) {
      const uint64_t t = AwaitGeneration(seen);
      seen = Generation(t);
      if (stop.load(std::memory_order_acquire)) return;
      if (IsStatic(t)) {
        if (index < Total(t)) {
          RunChunk(index);
          FinishChunk(Total(t));
        }
        continue;
      }
      for (int c; Claim(seen, &c);) {
        RunChunk(c);
        FinishChunk(Total(t));
      }
    }
  }

  // Publishes a job of `total` chunks (seq_cst pairs with AwaitGeneration);
  // returns its generation.
  uint32_t Publish(int total, bool is_static) {
    done.store(0);
    const uint32_t gen = Generation(ticket.load()) + 1;
    ticket.store(uint64_t{gen} << 32 | (is_static ? kStaticBit : 0) |
                 uint64_t(total) << 16);
    if (sleepers.load() > 0) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
    return gen;
  }

  // The caller's barrier: waits until all `total` chunks are done; with
  // spin_only (the static schedule's policy) it never blocks.
  void AwaitChunks(int total, bool spin_only) {
    if (done.load(std::memory_order_acquire) == total) return;
    const int64_t t0 = NowNanos();
    for (int i = 0; done.load(std::memory_order_acquire) != total; ++i) {
      if (spin_only) {
        SpinStep(std::min(i, kSpinIters));
        continue;
      }
      if (i % 64 == 63 && NowNanos() - t0 > kCallerSpinNanos) {
        caller_sleeping.store(true);
        ++stats.caller_sleeps;
        for (int d; (d = done.load()) != total;) done.wait(d);
        caller_sleeping.store(false);
        break;
      }
      CpuRelax();
    }
    const int64_t waited = NowNanos() - t0;
    stats.caller_wait_ns += waited;
    stats.max_wait_ns = std::max(stats.max_wait_ns, waited);
  }
};

ThreadPool::ThreadPool(int n_threads)
    : ThreadPool(n_threads, DefaultPoolSchedule()) {}

ThreadPool::ThreadPool(int n_threads, PoolSchedule schedule)
    : n_threads_(std::max(1, n_threads)), schedule_(schedule), impl_(new Impl) {
  for (int i = 1; i < n_threads_; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true);
  impl_->Publish(0, false);
  for (std::thread& t : impl_->workers) t.join();
  delete impl_;
}

void ThreadPool::set_schedule(PoolSchedule schedule) { schedule_ = schedule; }

ThreadPoolStats ThreadPool::stats() const { return impl_->stats; }
void ThreadPool::ResetStats() { impl_->stats = ThreadPoolStats{}; }

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t max_chunks =
      schedule_ == PoolSchedule::kStatic
          ? n_threads_
          : std::min(kMaxChunks, kChunksPerThread * n_threads_);
  const int64_t chunks = std::min(grains, max_chunks);
  if (n_threads_ <= 1 || chunks <= 1) {
    fn(0, n);
    return;
  }
  Impl& im = *impl_;
  im.fn = &fn;
  im.n = n;
  im.chunk = (grains + chunks - 1) / chunks * grain;
  const int total = static_cast<int>((n + im.chunk - 1) / im.chunk);
  const bool is_static = schedule_ == PoolSchedule::kStatic;
  const uint32_t gen = im.Publish(total, is_static);
  int mine = 0;
  if (is_static) {
    im.RunChunk(0);
    im.FinishChunk(total);
    mine = 1;
  } else {
    for (int c; im.Claim(gen, &c); ++mine) {
      im.RunChunk(c);
      im.FinishChunk(total);
    }
  }
  im.AwaitChunks(total, is_static);
  ++im.stats.jobs;
  im.stats.chunks += total;
  im.stats.caller_chunks += mine;
}

}  // namespace ckv::kernels::cpu
