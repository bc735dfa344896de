// The server's live status, as the status page shows it
// (server/http/status_json.h, docs/http-api.md "Status page"): one snapshot
// read from the objects that own each number (sessions, engine, admission,
// metrics; nothing is counted twice), and a ring buffer of per-second
// samples of throughput, time to first token and queue depth. No HTTP here.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "clusterkv/v1/clusterkv.pb.h"
#include "server/admission.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/service_state.h"
#include "server/session_manager.h"

namespace ckv::server {

// One session as the status page lists it.
struct SessionStatus {
  std::string id;
  std::string policy;  // KvPolicyName
  int64_t tokens = 0;
  int64_t clustered_tokens = 0;  // in segments with a built index
  int segments = 0;
  int64_t host_bytes = 0;  // shared segments included
  int64_t device_bytes = 0;
  int64_t cache_lookups = 0;  // device-cache blocks looked up ...
  int64_t cache_hits = 0;     // ... and found resident
  bool busy = false;          // a call holds it
  double idle_seconds = 0.0;  // since its last call
};

// Rates over one sampling interval (about a second).
struct StatusSample {
  int64_t unix_ms = 0;
  double input_tokens_per_second = 0.0;  // prompts and appended input
  double decode_tokens_per_second = 0.0;
  // Mean time to first token of the requests that finished in the interval
  // (the TTFT histogram is observed when a request ends); NaN: none did.
  double ttft_seconds = std::numeric_limits<double>::quiet_NaN();
  int queue_depth = 0;  // jobs queued or still feeding their input
  int sessions = 0;     // every tenant's
};

// Cumulative counters and gauges at one moment (StatusHistory's input).
struct StatusCounters {
  int64_t unix_ms = 0;
  double steady_seconds = 0.0;  // monotonic clock
  int64_t input_tokens = 0;     // EngineStats batched - decoded
  int64_t decoded_tokens = 0;
  bool has_ttft = false;  // false: the server keeps no metrics
  int64_t ttft_count = 0;
  double ttft_sum_seconds = 0.0;
  int queue_depth = 0;
  int sessions = 0;
};

struct ServerStatus {
  int64_t unix_ms = 0;
  // Model, backend, kernels, threads, limits, capacity, default KV config,
  // version, draining: what GetServerInfo answers.
  ::clusterkv::v1::ServerInfo info;
  MemoryTotals totals;  // every tenant's sessions and cached prefixes
  // The automatic prefix cache, all tenants (server/prefix_cache.h); its
  // bytes are part of totals.host_bytes (segments that sessions share with
  // it counted once there).
  PrefixCacheStats prefix_cache;
  // The caller's tenant's sessions, most recently used first, at most the
  // number asked; `tenant_sessions` counts them all.
  std::vector<SessionStatus> sessions;
  int tenant_sessions = 0;
  EngineStats engine;
  AdmissionStats admission;
  std::optional<MetricsTotals> metrics;  // nullopt: no metrics
  std::vector<StatusSample> history;     // oldest first
};

// The counters StatusHistory samples. FAILED_PRECONDITION before the
// backend is set.
absl::StatusOr<StatusCounters> ReadStatusCounters(const ServiceState& state);

// Per-second samples over the last `capacity` intervals.
class StatusHistory {
 public:
  static constexpr int kDefaultCapacity = 600;  // 10 minutes at 1 Hz

  explicit StatusHistory(int capacity = kDefaultCapacity);

  // Appends the rates between the previous call's counters and `now`; the
  // first call only sets that baseline. A call with no time elapsed since
  // the previous one is ignored.
  void Record(const StatusCounters& now);
  std::vector<StatusSample> Samples() const;  // oldest first

 private:
  const int capacity_;
  mutable absl::Mutex mu_;
  std::optional<StatusCounters> last_ ABSL_GUARDED_BY(mu_);
  std::deque<StatusSample> samples_ ABSL_GUARDED_BY(mu_);
};

// The snapshot for a caller of `tenant`, listing at most `max_listed` of
// its sessions; `history` may be null (no samples). UNAVAILABLE while the
// model loads; answers while draining (info.draining is set).
absl::StatusOr<ServerStatus> CollectStatus(const ServiceState& state,
                                           absl::string_view tenant,
                                           int max_listed,
                                           const StatusHistory* history);

}  // namespace ckv::server
