// A background thread that runs clustering jobs, so k-means of one layer
// overlaps the compute of the following layers. Shared by all stores of a
// process. Two classes of jobs: urgent ones (segments closed by decoding,
// whose session's next step waits for them) run before bulk ones (a
// prompt's segments, queued all at once when a long prefill ends), each
// class in submission order. A burst of a long prompt's k-means otherwise
// held every decoding session whose window closed meanwhile: 1.6 s for one
// token beside an 8k prefill (bench/stall_bench, docs/design.md). Jobs
// must not depend on later jobs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

namespace ckv {

enum class JobUrgency { kBulk, kUrgent };

class ClusterWorker {
 public:
  ClusterWorker();
  ~ClusterWorker();  // finishes queued jobs, then joins
  ClusterWorker(const ClusterWorker&) = delete;
  ClusterWorker& operator=(const ClusterWorker&) = delete;

  // Queues `job`; returns its ticket (increasing from 1 over both classes).
  int64_t Submit(std::function<void()> job,
                 JobUrgency urgency = JobUrgency::kBulk);
  // Blocks until the job with `ticket` has run (not necessarily the jobs
  // before it: an urgent job overtakes bulk ones). Ticket 0 is "nothing to
  // wait for".
  void Wait(int64_t ticket);
  // Whether the job with `ticket` has run (never blocks).
  bool IsDone(int64_t ticket);

 private:
  struct Queued {
    int64_t ticket;
    std::function<void()> job;
  };
  void Loop();
  bool DoneLocked(int64_t ticket) const;

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Queued> urgent_, bulk_;
  std::set<int64_t> unfinished_;  // queued or running
  int64_t submitted_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ckv
