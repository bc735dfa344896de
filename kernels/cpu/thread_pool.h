// A fixed pool of worker threads for data-parallel loops. The calling thread
// takes part in the work, so ThreadPool(1) runs everything inline.
//
// Scheduling: a job's range is cut into chunks whose boundaries depend only
// on (n, grain, pool size), never on timing, so results are the same run to
// run. Threads claim chunks one at a time from a shared counter: a thread
// that is descheduled (another process took its core) claims nothing while
// it is away, and the running threads absorb its share, instead of the job
// waiting for that thread's fixed slice (docs/design.md, "The thread pool").
#pragma once

#include <cstdint>
#include <functional>

namespace ckv::kernels::cpu {

// How ParallelFor hands out a job. kDynamic (the default): chunks claimed
// one at a time; the caller's barrier spins briefly, then blocks. kStatic:
// the pool's former policy, kept for measurements (bench/pool_ab_bench,
// engine_bench --pool-schedule): one fixed range per thread, every thread
// must run its own, and the caller's barrier spins (yielding) until then.
enum class PoolSchedule { kDynamic, kStatic };

// Schedule of pools constructed from now on (process-wide; for benchmarks).
void SetDefaultPoolSchedule(PoolSchedule schedule);
PoolSchedule DefaultPoolSchedule();

// Counters of ParallelFor calls that used more than one thread, summed
// since construction or ResetStats(). Read them while no job is running.
struct ThreadPoolStats {
  int64_t jobs = 0;
  int64_t chunks = 0;         // chunks run, by all threads
  int64_t caller_chunks = 0;  // ... of them by the calling thread
  // Wall time the calling thread waited, after its last chunk, for chunks
  // other threads held (the barrier at the end of each job).
  int64_t caller_wait_ns = 0;
  int64_t caller_sleeps = 0;  // waits that blocked instead of spinning
  // The longest single barrier wait.
  int64_t max_wait_ns = 0;
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ThreadPool(int n_threads, PoolSchedule schedule);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  PoolSchedule schedule() const { return schedule_; }
  // Changes the schedule of the following jobs (from the calling thread,
  // between jobs).
  void set_schedule(PoolSchedule schedule);

  // Calls fn(begin, end) over disjoint ranges covering [0, n), aligned to
  // `grain`, from any of the pool's threads (the caller included); returns
  // when all are done. The ranges are the same on every call with the same
  // (n, grain) on a pool of the same size and schedule. Not reentrant: fn
  // must not call ParallelFor on the same pool.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

  ThreadPoolStats stats() const;
  void ResetStats();

 private:
  struct Impl;
  int n_threads_;
  PoolSchedule schedule_;
  Impl* impl_;
};

}  // namespace ckv::kernels::cpu
