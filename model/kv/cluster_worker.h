// A background thread that runs clustering jobs in submission order, so
// k-means of one layer overlaps the compute of the following layers. Shared
// by all stores of a process. Jobs must not depend on later jobs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ckv {

class ClusterWorker {
 public:
  ClusterWorker();
  ~ClusterWorker();  // finishes queued jobs, then joins
  ClusterWorker(const ClusterWorker&) = delete;
  ClusterWorker& operator=(const ClusterWorker&) = delete;

  // Queues `job`; returns its ticket (increasing from 1).
  int64_t Submit(std::function<void()> job);
  // Blocks until the job with `ticket` (and every earlier one) has run.
  // Ticket 0 is "nothing to wait for".
  void Wait(int64_t ticket);
  // Whether the job with `ticket` has run (never blocks).
  bool IsDone(int64_t ticket);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  int64_t submitted_ = 0;
  int64_t completed_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ckv
