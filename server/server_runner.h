// The whole server in one object, used by main() and by in-process tests:
// the gRPC server (ClusterKv service, grpc.health.v1, reflection), the
// model, sessions, admission, the engine loop and a janitor thread that
// expires idle sessions and publishes gauges.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace ckv {
struct Model;
class ClusterWorker;
}  // namespace ckv

namespace ckv::server {

class Admission;
class ChatRenderer;
class ClusterKvService;
class TokenStore;
class EngineLoop;
class ServiceState;
class SessionManager;
class SessionSnapshots;

// A front door besides gRPC that drives this server's state (the HTTP API,
// server/http/). Stop() returns once no request of it runs any more.
class FrontDoor {
 public:
  virtual ~FrontDoor() = default;
  virtual void Stop() = 0;
};

class ClusterKvServer {
 public:
  // Listens on config.listen_address (port 0: ephemeral; logs "listening on
  // HOST:PORT"), health NOT_SERVING while the model loads, then SERVING.
  // A model that cannot be loaded: the gRPC server is shut down and the
  // error (naming the path) is returned. `metrics` may be null; it must
  // outlive the server. TLS and the tokens file are read here (errors name
  // the flag or file); ValidateTransportSecurity is checked first.
  static absl::StatusOr<std::unique_ptr<ClusterKvServer>> Start(
      const ServerConfig& config, ServerMetrics* metrics);
  ~ClusterKvServer();  // Drain(0) unless drained

  int port() const { return port_; }
  const ServerConfig& config() const { return config_; }
  // Engine steps run so far (benchmarks: gaps measured in engine steps).
  int64_t engine_steps() const;

  // Rereads --auth-tokens-file (SIGHUP). On error (logged without any
  // token) the previous tokens stay in force. OK when auth is off.
  absl::Status ReloadTokens();

  // Drain, first half (returns at once): health NOT_SERVING, new calls get
  // UNAVAILABLE, the engine accepts no job.
  void BeginDrain();
  // Second half: running streams get `grace` to finish, then are cancelled
  // (UNAVAILABLE to their clients); the gRPC server shuts down. Idempotent.
  void FinishDrain(absl::Duration grace);
  void Drain(absl::Duration grace) {
    BeginDrain();
    FinishDrain(grace);
  }

  // What the calls share (backend set once Start returned).
  ServiceState& state() { return *state_; }
  // Owns `door`: stopped in FinishDrain once running streams ended or were
  // cancelled, and destroyed before the engine and sessions.
  void AddFrontDoor(std::unique_ptr<FrontDoor> door);

 private:
  explicit ClusterKvServer(const ServerConfig& config);
  absl::Status StartGrpc(ServerMetrics* metrics);
  absl::Status LoadBackend();
  absl::Status OpenSnapshots();  // --snapshot-dir
  void StartRecallSampling();    // --recall-sample-every
  void SnapshotSessions();       // on drain
  void SetHealth(bool serving);
  void JanitorLoop();
  void PublishGauges();

  ServerConfig config_;
  int port_ = 0;
  bool drained_ = false;
  // Destroyed bottom-up: the gRPC server first, the engine (whose jobs hold
  // reactors and sessions) before the sessions, the state and tokens last.
  std::unique_ptr<TokenStore> tokens_;  // null: no authentication
  std::unique_ptr<ServiceState> state_;
  std::unique_ptr<ClusterKvService> service_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ClusterWorker> worker_;
  std::unique_ptr<SessionSnapshots> snapshots_;  // null: no --snapshot-dir
  std::unique_ptr<SessionManager> sessions_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<EngineLoop> engine_;
  std::unique_ptr<ChatRenderer> chat_;  // the model's chat template
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<FrontDoor>> front_doors_;
  absl::Notification stop_janitor_;
  std::thread janitor_;
  int64_t last_steps_ = 0, last_batched_ = 0;  // janitor thread only
  Backend::Residency last_residency_;          // janitor thread only
};

}  // namespace ckv::server
