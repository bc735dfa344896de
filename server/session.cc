#include "server/session.h"

#include <chrono>

namespace ckv::server {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Session::Session(std::string id, std::string parent_id,
                 const KvStoreConfig& kv, const SamplingParams& sampling,
                 uint32_t idle_ttl_seconds,
                 std::unique_ptr<ClusteredKvStore> store, std::string tenant)
    : id_(std::move(id)),
      parent_id_(std::move(parent_id)),
      tenant_(std::move(tenant)),
      kv_(kv),
      sampling_(sampling),
      idle_ttl_seconds_(idle_ttl_seconds),
      created_unix_ms_(NowUnixMs()),
      store_(std::move(store)),
      last_used_unix_ms_(created_unix_ms_) {
  PublishStats();
}

void Session::set_store(std::unique_ptr<ClusteredKvStore> store) {
  store_ = std::move(store);
}

void Session::PublishStats() {
  SessionStats s;
  s.tokens = store_->num_tokens();
  s.clustered_tokens = store_->clustered_tokens();
  s.segments = static_cast<int>(store_->segments().size());
  s.memory = store_->memory();
  s.cache = store_->cache_stats();
  // Index bytes only once built: the ClusterWorker writes them until then.
  const bool indexed = store_->IndexReady();
  for (const auto& seg : store_->segments()) {
    if (seg.use_count() > 1) {
      s.shared_segments.emplace_back(
          seg->uid(), seg->kv_bytes() + (indexed ? seg->index_bytes() : 0));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = s;
}

SessionView Session::View() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SessionView{stats_, busy_ || forks_in_flight_ > 0, last_used_unix_ms_};
}

SessionStats Session::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Session::AppendRecentTokens(absl::Span<const int32_t> ids) {
  recent_tokens_.insert(recent_tokens_.end(), ids.begin(), ids.end());
  const size_t cap = kMaxPenaltyLastN;
  if (recent_tokens_.size() > cap) {
    recent_tokens_.erase(recent_tokens_.begin(), recent_tokens_.end() - cap);
  }
}

void Session::SetCanceller(std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  canceller_ = std::move(cancel);
  if (cancel_requested_ && canceller_) canceller_();
}

bool Session::CancelRunning() {
  std::lock_guard<std::mutex> lock(mu_);
  if (canceller_) {
    canceller_();
    return true;
  }
  if (!busy_) return false;
  cancel_requested_ = true;
  return true;
}

bool Session::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_ || forks_in_flight_ > 0;
}

int64_t Session::last_used_unix_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_used_unix_ms_;
}

SessionLease& SessionLease::operator=(SessionLease&& o) {
  if (this != &o) {
    Release();
    session_ = std::move(o.session_);
  }
  return *this;
}

SessionLease::~SessionLease() { Release(); }

void SessionLease::Release() {
  if (session_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(session_->mu_);
    session_->busy_ = false;
    session_->canceller_ = nullptr;
    session_->cancel_requested_ = false;
    session_->last_used_unix_ms_ = NowUnixMs();
  }
  session_ = nullptr;
}

}  // namespace ckv::server
