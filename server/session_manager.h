// Owns the sessions of the server: creation with admission against the
// limits, lookup, fork, close, exclusive leases for calls, idle expiry and
// memory totals in which segments shared by forks are counted once.
//
// Tenants: every session belongs to the tenant that created it (a fork to
// its parent's), and lookups take the caller's tenant. A session of another
// tenant is NOT_FOUND with the same message as an unknown id, so neither
// its existence nor its segments (shared only along one tenant's fork tree)
// leak across tenants. The tenant argument defaults to the anonymous tenant
// (no authentication); with authentication on, no session has that tenant,
// so a call site that forgets to pass the caller's tenant finds nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/kv/cluster_worker.h"
#include "model/kv/store_env.h"
#include "model/model_config.h"
#include "server/prefix_cache.h"
#include "server/server_config.h"
#include "server/session.h"
#include "server/session_snapshots.h"

namespace ckv::server {

struct JobSpec;  // server/engine_loop.h
class ServerMetrics;

// The tenant of every call when authentication is off.
inline constexpr absl::string_view kAnonymousTenant = "";

struct SessionOptions {
  KvStoreConfig kv;               // already merged with the server defaults
  SamplingParams sampling;        // already merged with the server defaults
  uint32_t idle_ttl_seconds = 0;  // 0: the server's default
  // Routing key (deploy/README.md "Session affinity"): when set, the id is
  // "<routing_key>.<random>" so that a proxy hashing on the key before the
  // first '.' sends every call of the session to this replica. Validated
  // with ValidateRoutingKey. Empty: the id is "<random>" (its own key).
  std::string routing_key;
  std::string tenant{kAnonymousTenant};  // owner of the new session
};

// The routing key of a session id or x-session-id value: the part before the
// first '.', or the whole value.
absl::string_view RoutingKeyOf(absl::string_view id);
// INVALID_ARGUMENT unless 1..64 characters of [A-Za-z0-9_-].
absl::Status ValidateRoutingKey(absl::string_view key);

// Session ids are 1..128 bytes of [A-Za-z0-9._-], not starting with '.'
// (what CreateSession and ForkSession make: "[routing_key.]s-<hex>").
inline constexpr size_t kMaxSessionIdBytes = 128;
// INVALID_ARGUMENT for anything else, quoting none of it.
absl::Status ValidateSessionId(absl::string_view id);

struct MemoryTotals {
  int64_t host_bytes = 0;  // shared segments counted once
  int64_t device_bytes = 0;
  int sessions = 0;
};

class SessionManager {
 public:
  SessionManager(const ModelConfig& model, const ServerLimits& limits,
                 ClusterWorker* worker);

  // RESOURCE_EXHAUSTED naming max_sessions (or tenant_max_sessions) when
  // full; INVALID_ARGUMENT for a bad KV config.
  absl::StatusOr<std::shared_ptr<Session>> Create(const SessionOptions& o);
  // INVALID_ARGUMENT for an id that ValidateSessionId refuses (also in
  // Acquire, Fork and Close); NOT_FOUND for an unknown (or closed) id or
  // another tenant's session.
  // With snapshots on, an id known only from its snapshot is restored here
  // (FAILED_PRECONDITION when the snapshot is unusable; RESOURCE_EXHAUSTED
  // naming max_sessions or max_host_kv_bytes when it does not fit).
  absl::StatusOr<std::shared_ptr<Session>> Get(
      const std::string& id, absl::string_view tenant = kAnonymousTenant);
  // Exclusive use for one call: ABORTED if the session is busy.
  absl::StatusOr<SessionLease> Acquire(
      const std::string& id, absl::string_view tenant = kAnonymousTenant);
  // A child of the same tenant sharing the parent's segments (and routing
  // key: its id is "<RoutingKeyOf(parent)>.<random>"); ABORTED while the
  // parent is busy with an exclusive call. Concurrent forks of one parent
  // all succeed (they share a read-only hold on it).
  absl::StatusOr<std::shared_ptr<Session>> Fork(
      const std::string& id, absl::string_view tenant = kAnonymousTenant);
  // ABORTED while busy; returns the host bytes freed (not shared ones).
  // Deletes the session's snapshot.
  absl::StatusOr<int64_t> Close(const std::string& id,
                                absl::string_view tenant = kAnonymousTenant);
  // Every session of every tenant (server internals: expiry, totals).
  std::vector<std::shared_ptr<Session>> List() const;
  // The sessions of one tenant, oldest first.
  std::vector<std::shared_ptr<Session>> ListTenant(
      absl::string_view tenant) const;
  // Closes idle sessions whose TTL expired (snapshotting them first when
  // snapshots are on, so that a later call restores them); returns how many.
  int ExpireIdle(int64_t now_unix_ms);

  // Durable sessions (server/session_snapshots.h); set once before serving.
  void set_snapshots(SessionSnapshots* snapshots) { snapshots_ = snapshots; }
  // What new and restored sessions' stores get from the backend
  // (Backend::store_env(): segment-row arena, layer planner; the heap and
  // host policies until set). Set before serving.
  void set_store_env(StoreEnv env) { env_ = std::move(env); }
  // Snapshots every session that is not busy (drain); returns how many.
  int SnapshotAll();

  // The automatic prefix cache (server/prefix_cache.h) for a session-less
  // request: `spec` leases the empty session created for this one request
  // (closed when it ends) and carries its whole prompt as input
  // (AppendKind::kPrompt). Seeds the session with the tenant's longest
  // cached run of whole blocks of the prompt (never all of it: at least one
  // token is prefilled, for the logits), removes those tokens from
  // spec.input, makes the session close its prompt segments at block
  // boundaries, and arranges (through spec.callbacks.before_release) for
  // the prompt's whole blocks to be cached when the job succeeds. Counts the
  // hit or miss in `metrics` (may be null). Returns the prompt tokens
  // reused, the request's cached_tokens (0: a miss, the cache is off, or
  // `spec` is not such a request). Call it after the lease, before building
  // the AdmissionRequest from the session and spec.input.
  int64_t UsePrefixCache(JobSpec& spec, ServerMetrics* metrics);
  const PrefixCache& prefix_cache() const { return prefix_cache_; }

  // Sessions and the prefix cache's blocks (each segment once).
  MemoryTotals Totals() const;
  // The same over one tenant's sessions and cached blocks (its per-tenant
  // KV usage).
  MemoryTotals TenantTotals(absl::string_view tenant) const;
  // Bytes per token of a session's KV in the host tier (all layers).
  int64_t HostBytesPerToken() const;
  const ServerLimits& limits() const { return limits_; }

 private:
  class ForkHold;
  absl::StatusOr<std::unique_ptr<ForkHold>> HoldForFork(
      const std::string& id, absl::string_view tenant);
  std::string NewId();
  // max_sessions, then tenant_max_sessions for `tenant`. Needs mu_.
  absl::Status CheckSessionLimitsLocked(absl::string_view tenant) const;
  // `tenant`: whose cached blocks to add (null: every tenant's).
  MemoryTotals Sum(const std::vector<std::shared_ptr<Session>>& list,
                   const std::string* tenant) const;
  std::shared_ptr<Session> Find(const std::string& id) const;
  absl::StatusOr<std::shared_ptr<Session>> Restore(const std::string& id,
                                                   absl::string_view tenant);
  // Marks the leased session closed and forgets it; returns the host bytes
  // freed.
  int64_t CloseLeased(SessionLease& lease);

  const KvShape shape_;
  const ServerLimits limits_;
  ClusterWorker* worker_;
  StoreEnv env_;
  mutable std::mutex mu_;
  // Guarded by mu_.
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_;
  uint64_t id_counter_ = 0;
  SessionSnapshots* snapshots_ = nullptr;  // null: off
  std::mutex restore_mu_;  // one restore at a time: an id is loaded once
  PrefixCache prefix_cache_;
};

}  // namespace ckv::server
