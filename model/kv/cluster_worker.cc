#include "model/kv/cluster_worker.h"

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

int64_t ClusterWorker::Submit(std::function<void()> job) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_cv_.notify_one();
  return ticket;
}

void ClusterWorker::Wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return completed_ >= ticket; });
}

bool ClusterWorker::IsDone(int64_t ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= ticket;
}

void ClusterWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    ++completed_;
    done_cv_.notify_all();
  }
}

}  // namespace ckv
