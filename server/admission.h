// Admission control: a request is refused before any work starts when it
// would exceed a limit (docs/design.md "Memory and limits"). The
// footprint of a request is known from its length, so memory is reserved up
// front and released when the job ends; concurrent requests cannot together
// overshoot a limit that each alone would respect.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "model/kv/kv_config.h"
#include "server/limits.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "server/session_manager.h"

namespace ckv::server {

struct AdmissionRequest {
  int64_t input_tokens = 0;              // appended by the job
  int64_t max_new_tokens = 0;            // generated at most (0 for a prefill)
  int64_t session_tokens = 0;            // already in the session
  KvStoreConfig kv;                      // the session's effective settings
  std::string tenant{kAnonymousTenant};  // the session's tenant
};

class Admission;

// What admission holds now and has let through so far.
struct AdmissionStats {
  int64_t admitted = 0;             // tickets issued since start
  int64_t reserved_host_bytes = 0;  // held by running jobs' tickets
  int64_t reserved_device_bytes = 0;
};

// Bytes reserved for one admitted job; returned when destroyed.
class AdmissionTicket {
 public:
  AdmissionTicket(Admission* owner, std::string tenant, int64_t host,
                  int64_t device)
      : owner_(owner),
        tenant_(std::move(tenant)),
        host_(host),
        device_(device) {}
  ~AdmissionTicket();
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;

 private:
  Admission* owner_;
  const std::string tenant_;
  int64_t host_, device_;
};

class Admission {
 public:
  // `sessions` and `metrics` must outlive this object and every ticket.
  Admission(const ServerLimits& limits, const SessionManager* sessions,
            int n_layers, ServerMetrics* metrics);

  // RESOURCE_EXHAUSTED naming the limit (max_prompt_tokens,
  // max_session_tokens, max_host_kv_bytes, tenant_max_host_kv_bytes,
  // max_device_kv_bytes) and counting
  // the rejection in metrics; otherwise a ticket holding the reservation.
  absl::StatusOr<std::unique_ptr<AdmissionTicket>> Admit(
      const AdmissionRequest& r);

  // Device-tier bytes `new_tokens` more tokens may add to a session with
  // settings `kv`: every layer for the full policy, else the dense layers
  // plus the tail (at most `window` tokens) of the sparse ones.
  int64_t DeviceBytesEstimate(const KvStoreConfig& kv,
                              int64_t new_tokens) const;

  AdmissionStats stats() const;

 private:
  friend class AdmissionTicket;
  // RESOURCE_EXHAUSTED carrying `limit` (server/limits.h), counted.
  absl::Status Reject(Limit limit, int64_t need, int64_t max);
  // tenant_max_host_kv_bytes: `tenant` holds `tenant_host` bytes in its
  // sessions and asks for `host` more.
  absl::Status CheckTenantLocked(const std::string& tenant, int64_t tenant_host,
                                 int64_t host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const std::string& tenant, int64_t host, int64_t device);

  const ServerLimits limits_;
  const SessionManager* sessions_;
  const int n_layers_;
  ServerMetrics* metrics_;
  mutable absl::Mutex mu_;
  int64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reserved_host_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reserved_device_ ABSL_GUARDED_BY(mu_) = 0;
  // Host bytes reserved per tenant (entries removed when back to 0).
  absl::flat_hash_map<std::string, int64_t> reserved_tenant_host_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ckv::server
