#include "model/kv/cluster_worker.h"

#include <utility>

namespace ckv {

ClusterWorker::ClusterWorker() : thread_([this] { Loop(); }) {}

ClusterWorker::~ClusterWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

int64_t ClusterWorker::Submit(std::function<void()> job, JobUrgency urgency) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = ++submitted_;
    unfinished_.insert(ticket);
    (urgency == JobUrgency::kUrgent ? urgent_ : bulk_)
        .push_back({ticket, std::move(job)});
  }
  work_cv_.notify_one();
  return ticket;
}

bool ClusterWorker::DoneLocked(int64_t ticket) const {
  return ticket <= submitted_ && !unfinished_.contains(ticket);
}

void ClusterWorker::Wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return DoneLocked(ticket); });
}

bool ClusterWorker::IsDone(int64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return DoneLocked(ticket);
}

void ClusterWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock,
                  [&] { return stop_ || !urgent_.empty() || !bulk_.empty(); });
    std::deque<Queued>& from = !urgent_.empty() ? urgent_ : bulk_;
    if (from.empty()) return;  // stop_ and drained
    Queued next = std::move(from.front());
    from.pop_front();
    lock.unlock();
    next.job();
    lock.lock();
    unfinished_.erase(next.ticket);
    done_cv_.notify_all();
  }
}

}  // namespace ckv
