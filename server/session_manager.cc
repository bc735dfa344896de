#include "server/session_manager.h"

#include <algorithm>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/limits.h"
#include "server/metrics.h"

namespace ckv::server {

SessionManager::SessionManager(const ModelConfig& model,
                               const ServerLimits& limits,
                               ClusterWorker* worker)
    : shape_(KvShapeOf(model)),  // with the model's sliding-window layers
      limits_(limits),
      worker_(worker),
      prefix_cache_(limits.prefix_cache_bytes,
                    limits.prefix_cache_block_tokens) {}

int64_t SessionManager::HostBytesPerToken() const {
  return int64_t{2} * 2 * shape_.head_dim * shape_.n_kv_heads * shape_.n_layers;
}

// Ids are random (not guessable from another session's id) and unique.
std::string SessionManager::NewId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("s-%016x%04x", rng(), ++id_counter_ & 0xffff);
}

absl::string_view RoutingKeyOf(absl::string_view id) {
  return id.substr(0, id.find('.'));
}

absl::Status ValidateRoutingKey(absl::string_view key) {
  const bool ok = !key.empty() && key.size() <= 64 &&
                  std::all_of(key.begin(), key.end(), [](char c) {
                    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                           c == '-' || c == '_';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "x-session-id routing key must be 1-64 characters of [A-Za-z0-9_-]");
}

absl::Status ValidateSessionId(absl::string_view id) {
  const bool ok = !id.empty() && id.size() <= kMaxSessionIdBytes &&
                  id[0] != '.' && std::all_of(id.begin(), id.end(), [](char c) {
                    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                           c == '-' || c == '_' || c == '.';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("session_id must be 1-", kMaxSessionIdBytes,
                   " characters of [A-Za-z0-9._-] not starting with '.' (got ",
                   id.size(), " bytes)"));
}

absl::Status SessionManager::CheckSessionLimitsLocked(
    absl::string_view tenant) const {
  if (static_cast<int>(sessions_.size()) >= limits_.max_sessions) {
    return LimitExceeded(Limit::kMaxSessions, limits_.max_sessions,
                         absl::StrCat("max_sessions limit reached (",
                                      limits_.max_sessions, " sessions)"));
  }
  if (limits_.tenant_max_sessions <= 0) return absl::OkStatus();
  int of_tenant = 0;
  for (const auto& [id, s] : sessions_) of_tenant += s->tenant() == tenant;
  if (of_tenant >= limits_.tenant_max_sessions) {
    return LimitExceeded(
        Limit::kTenantMaxSessions, limits_.tenant_max_sessions,
        absl::StrCat("tenant_max_sessions limit reached (",
                     limits_.tenant_max_sessions, " sessions per tenant)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Create(
    const SessionOptions& o) {
  if (!o.routing_key.empty()) {
    if (auto s = ValidateRoutingKey(o.routing_key); !s.ok()) return s;
  }
  if (auto s = ValidateKvStoreConfig(o.kv); !s.ok()) return s;
  if (auto s = ValidateSamplingParams(o.sampling); !s.ok()) return s;
  KvStoreConfig kv = o.kv;
  kv.max_tokens = limits_.max_session_tokens;
  auto store = std::make_unique<ClusteredKvStore>(shape_, kv, worker_, env_);
  const uint32_t ttl = o.idle_ttl_seconds ? o.idle_ttl_seconds
                                          : limits_.session_idle_ttl_seconds;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = CheckSessionLimitsLocked(o.tenant); !s.ok()) return s;
  std::string id = o.routing_key.empty()
                       ? NewId()
                       : absl::StrCat(o.routing_key, ".", NewId());
  auto session = std::make_shared<Session>(std::move(id), "", kv, o.sampling,
                                           ttl, std::move(store), o.tenant);
  sessions_[session->id()] = session;
  return session;
}

namespace {
// The one message for an unknown id and for another tenant's session.
absl::Status UnknownSession(const std::string& id) {
  return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
}

absl::Status Busy(const std::string& id) {
  return absl::AbortedError(
      absl::StrCat("session '", id, "' is busy with another call"));
}
}  // namespace

std::shared_ptr<Session> SessionManager::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Get(
    const std::string& id, absl::string_view tenant) {
  if (auto valid = ValidateSessionId(id); !valid.ok()) return valid;
  std::shared_ptr<Session> s = Find(id);
  if (s == nullptr && snapshots_ != nullptr && snapshots_->Has(id)) {
    return Restore(id, tenant);
  }
  if (s == nullptr || s->tenant() != tenant) return UnknownSession(id);
  return s;
}

// Loads a snapshotted session (not registered when another tenant asks).
absl::StatusOr<std::shared_ptr<Session>> SessionManager::Restore(
    const std::string& id, absl::string_view tenant) {
  std::lock_guard<std::mutex> restoring(restore_mu_);
  std::shared_ptr<Session> s = Find(id);  // restored by a concurrent call?
  if (s == nullptr) {
    auto restored = snapshots_->Restore(id, worker_, env_);
    if (!restored.ok()) return restored.status();
    s = *std::move(restored);
    if (s->tenant() != tenant) return UnknownSession(id);  // not registered
    const int64_t host = s->stats().memory.host_bytes;
    const int64_t total = Totals().host_bytes;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto st = CheckSessionLimitsLocked(tenant); !st.ok()) return st;
    if (total + host > limits_.max_host_kv_bytes) {
      return LimitExceeded(
          Limit::kMaxHostKvBytes, limits_.max_host_kv_bytes,
          absl::StrCat("max_host_kv_bytes limit exceeded: restoring session '",
                       id, "' needs ", host, " bytes, ", total, " of ",
                       limits_.max_host_kv_bytes, " are in use"));
    }
    sessions_[id] = s;
  }
  if (s->tenant() != tenant) return UnknownSession(id);
  return s;
}

absl::StatusOr<SessionLease> SessionManager::Acquire(const std::string& id,
                                                     absl::string_view tenant) {
  auto session = Get(id, tenant);
  if (!session.ok()) return session.status();
  Session& s = **session;
  std::lock_guard<std::mutex> lock(s.mu_);
  if (s.closed_) return UnknownSession(id);
  if (s.busy_ || s.forks_in_flight_ > 0) return Busy(id);
  s.busy_ = true;
  return SessionLease(*session);
}

// A shared, read-only hold on a session while it is forked: any number of
// ForkSession calls share it (the store's Fork is const); exclusive calls
// get ABORTED until the last one ends.
class SessionManager::ForkHold {
 public:
  explicit ForkHold(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  ForkHold(const ForkHold&) = delete;
  ForkHold& operator=(const ForkHold&) = delete;
  ~ForkHold() {
    std::lock_guard<std::mutex> lock(session_->mu_);
    --session_->forks_in_flight_;
    session_->last_used_unix_ms_ = NowUnixMs();
  }
  Session& session() const { return *session_; }

 private:
  std::shared_ptr<Session> session_;
};

absl::StatusOr<std::unique_ptr<SessionManager::ForkHold>>
SessionManager::HoldForFork(const std::string& id, absl::string_view tenant) {
  auto session = Get(id, tenant);
  if (!session.ok()) return session.status();
  Session& s = **session;
  std::lock_guard<std::mutex> lock(s.mu_);
  if (s.closed_) return UnknownSession(id);
  if (s.busy_) return Busy(id);
  ++s.forks_in_flight_;
  return std::make_unique<ForkHold>(*session);
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Fork(
    const std::string& id, absl::string_view tenant) {
  auto hold = HoldForFork(id, tenant);
  if (!hold.ok()) return hold.status();
  Session& parent = (*hold)->session();
  auto store = parent.store().Fork();
  if (!store.ok()) return store.status();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = CheckSessionLimitsLocked(parent.tenant()); !s.ok()) return s;
  std::string child_id = absl::StrCat(RoutingKeyOf(parent.id()), ".", NewId());
  auto child = std::make_shared<Session>(
      std::move(child_id), parent.id(), parent.kv(), parent.sampling(),
      parent.idle_ttl_seconds(), *std::move(store), parent.tenant());
  child->set_last_logits(parent.last_logits());
  child->AppendRecentTokens(parent.recent_tokens());
  child->conversation() = parent.conversation();
  sessions_[child->id()] = child;
  parent.PublishStats();  // its segments are shared now
  return child;
}

absl::StatusOr<int64_t> SessionManager::Close(const std::string& id,
                                              absl::string_view tenant) {
  auto lease = Acquire(id, tenant);
  if (!lease.ok()) return lease.status();
  if (snapshots_ != nullptr) snapshots_->Remove(id);
  return CloseLeased(*lease);
}

int64_t SessionManager::CloseLeased(SessionLease& lease) {
  Session& s = *lease.get();
  const KvMemoryStats m = s.store().memory();
  {
    std::lock_guard<std::mutex> lock(s.mu_);
    s.closed_ = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  sessions_.erase(s.id());
  return m.host_bytes - m.host_shared_bytes;
}

std::vector<std::shared_ptr<Session>> SessionManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Session>> out;
  for (const auto& [id, s] : sessions_) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a->created_unix_ms() < b->created_unix_ms() ||
           (a->created_unix_ms() == b->created_unix_ms() && a->id() < b->id());
  });
  return out;
}

std::vector<std::shared_ptr<Session>> SessionManager::ListTenant(
    absl::string_view tenant) const {
  std::vector<std::shared_ptr<Session>> out = List();
  auto other = [&](const auto& s) { return s->tenant() != tenant; };
  out.erase(std::remove_if(out.begin(), out.end(), other), out.end());
  return out;
}

int SessionManager::ExpireIdle(int64_t now_unix_ms) {
  int closed = 0;
  for (const auto& s : List()) {
    if (s->busy()) continue;
    const int64_t idle_ms = now_unix_ms - s->last_used_unix_ms();
    if (idle_ms < int64_t{s->idle_ttl_seconds()} * 1000) continue;
    auto lease = Acquire(s->id(), s->tenant());
    if (!lease.ok()) continue;  // busy again
    if (snapshots_ != nullptr) snapshots_->SaveAndLog(*lease->get(), "idle");
    CloseLeased(*lease);
    ++closed;
  }
  return closed;
}

int SessionManager::SnapshotAll() {
  if (snapshots_ == nullptr) return 0;
  int saved = 0;
  for (const auto& s : List()) {
    auto lease = Acquire(s->id(), s->tenant());
    if (lease.ok() && snapshots_->SaveAndLog(*lease->get(), "drain")) ++saved;
  }
  return saved;
}

// Host bytes: every session's private part plus each shared segment once.
MemoryTotals SessionManager::Totals() const { return Sum(List(), nullptr); }

MemoryTotals SessionManager::TenantTotals(absl::string_view tenant) const {
  const std::string t(tenant);
  return Sum(ListTenant(tenant), &t);
}

MemoryTotals SessionManager::Sum(
    const std::vector<std::shared_ptr<Session>>& list,
    const std::string* tenant) const {
  MemoryTotals t;
  absl::flat_hash_set<int64_t> seen;
  for (const auto& s : list) {
    const SessionStats st = s->stats();
    t.device_bytes += st.memory.working_set_bytes;
    t.host_bytes += st.memory.host_bytes - st.memory.host_shared_bytes;
    for (const auto& [uid, bytes] : st.shared_segments) {
      if (seen.insert(uid).second) t.host_bytes += bytes;
    }
    ++t.sessions;
  }
  std::vector<std::pair<int64_t, int64_t>> cached;
  prefix_cache_.AppendSegments(tenant, &cached);
  for (const auto& [uid, bytes] : cached) {
    if (seen.insert(uid).second) t.host_bytes += bytes;
  }
  return t;
}

int64_t SessionManager::UsePrefixCache(JobSpec& spec, ServerMetrics* metrics) {
  Session* session = spec.lease.get();
  if (!prefix_cache_.enabled() || session == nullptr ||
      spec.kind != AppendKind::kPrompt || spec.input.empty() ||
      session->store().num_tokens() != 0) {
    return 0;
  }
  const int64_t block = prefix_cache_.block_tokens();
  const int64_t n = static_cast<int64_t>(spec.input.size());
  const PrefixCache::Match match = prefix_cache_.Lookup(
      session->tenant(), session->kv(), spec.input, (n - 1) / block);
  int64_t reused = 0;
  if (match.store != nullptr) {
    auto store = match.store->Fork(session->kv());
    if (store.ok()) {
      session->set_store(*std::move(store));
      reused = match.tokens;
    }
  }
  session->store().set_prompt_block_tokens(block);
  if (metrics != nullptr) metrics->AddPrefixCacheLookup(reused > 0, reused);
  // The whole prompt, for the blocks this job adds to the cache.
  auto prompt = std::make_shared<std::vector<int32_t>>(spec.input);
  spec.input.erase(spec.input.begin(), spec.input.begin() + reused);
  session->PublishStats();
  auto after = std::move(spec.callbacks.before_release);
  spec.callbacks.before_release = [this, prompt, after](const JobResult& r,
                                                        Session& s) {
    if (r.status.ok()) {
      const int64_t blocks =
          static_cast<int64_t>(prompt->size()) / prefix_cache_.block_tokens();
      prefix_cache_.Insert(s.tenant(), *prompt, blocks, s.store());
    }
    if (after) after(r, s);
  };
  return reused;
}

}  // namespace ckv::server
