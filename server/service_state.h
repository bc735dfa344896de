// What every RPC handler of the service shares: configuration, metrics, the
// engine objects (set once the model is loaded), the draining flag and the
// count of live streaming calls. No gRPC headers here.
#pragma once

#include <atomic>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "model/model.h"
#include "server/admission.h"
#include "server/auth.h"
#include "server/blocking_pool.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "server/session_manager.h"

namespace ckv::server {

class ChatRenderer;  // server/chat_input.h

// The loaded engine; every pointer but `snapshots` and `chat` is non-null
// once set.
struct ServiceBackend {
  const Model* model = nullptr;
  SessionManager* sessions = nullptr;
  EngineLoop* engine = nullptr;
  Admission* admission = nullptr;
  SessionSnapshots* snapshots = nullptr;  // null: no --snapshot-dir
  const ChatRenderer* chat = nullptr;     // null: no chat messages
};

class ServiceState {
 public:
  // `metrics` may be null (no metrics); `tokens` null: no authentication
  // (one anonymous tenant). Both must outlive this object.
  ServiceState(const ServerConfig& config, ServerMetrics* metrics,
               const TokenStore* tokens = nullptr)
      : config_(config),
        metrics_(metrics),
        tokens_(tokens),
        blocking_pool_(config.blocking_threads) {}

  const ServerConfig& config() const { return config_; }
  ServerMetrics* metrics() const { return metrics_; }
  const TokenStore* tokens() const { return tokens_; }

  // Called once, after the model is loaded; the objects must outlive every
  // call (the runner shuts the gRPC server down before destroying them).
  void SetBackend(const ServiceBackend& backend);
  // The backend for a new call: UNAVAILABLE while loading or draining.
  absl::StatusOr<ServiceBackend> Backend() const;
  // The backend whatever the state (null pointers while loading).
  ServiceBackend backend_unchecked() const;

  // New calls get UNAVAILABLE from now on; running ones continue.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // Where unary RPCs run (never on the gRPC callback thread).
  BlockingPool& blocking_pool() { return blocking_pool_; }

  // Live streaming calls (reactors not yet destroyed).
  void StreamStarted();
  void StreamEnded();
  int active_streams() const;
  // True when no stream is live, waiting at most `timeout`.
  bool WaitStreamsDone(absl::Duration timeout);

 private:
  const ServerConfig config_;
  ServerMetrics* const metrics_;
  const TokenStore* const tokens_;
  std::atomic<bool> draining_{false};
  mutable absl::Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  ServiceBackend backend_ ABSL_GUARDED_BY(mu_);
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  // Last member: its destructor finishes queued calls while the rest of the
  // state is still alive.
  BlockingPool blocking_pool_;
};

}  // namespace ckv::server
