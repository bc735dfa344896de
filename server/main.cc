// clusterkv-server: serves one model's sessions over gRPC (ClusterKv,
// grpc.health.v1, reflection) with Prometheus /metrics. SIGTERM or SIGINT
// drains (health NOT_SERVING, new calls UNAVAILABLE, running streams get
// --drain-grace-seconds, then are cancelled) and exits 0. A model that cannot
// be loaded: error message, exit 1. Bad flags (including plain TCP on a
// non-loopback address without --insecure): exit 2. SIGHUP rereads
// --auth-tokens-file.
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "model/kv/policies/registry.h"
#include "server/flags.h"
#include "server/http/http_server.h"
#include "server/http/metrics_endpoint.h"
#include "server/metrics.h"
#include "server/server_runner.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kUsageLimits[] =
    "  [--max-sessions N] [--max-host-kv-bytes N] [--max-device-kv-bytes N]\n"
    "  [--max-prompt-tokens N] [--max-session-tokens N]\n"
    "  [--max-queued-requests N] [--session-idle-ttl-seconds N]\n"
    "  [--drain-grace-seconds N]\n"
    "  [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--insecure]\n"
    "  [--auth-tokens-file F] [--tenant-max-sessions N]\n"
    "  [--tenant-max-host-kv-bytes N] [--context-length N]\n"
    "  [--http-io-threads N] [--http-{header,body,idle,write}-timeout-seconds "
    "N]\n"
    "  [--http-max-{uri,header,body}-bytes N] [--http-max-header-count N]\n"
    "  [--http-max-connections N] [--http-max-connections-per-address N]\n"
    "  [--http-max-choices N]\n";

// The policy names come from the registry (the ones a server serves), the
// other KV flags from the settings schema.
std::string Usage() {
  return absl::StrCat(
      "usage: clusterkv-server --model MODEL.gguf [--listen HOST:PORT]\n"
      "  [--metrics-address HOST:PORT] [--http-listen HOST:PORT]\n"
      "  [--backend auto|cpu|cuda|fake] [--threads N] [--prefill-chunk N]\n"
      "  [--prefill-share F] [--weights-memory auto|map|huge-pages]\n"
      "  [--fake-schedule inline|lazy|threaded] [--fake-device-mb N]\n"
      "  [--policy ",
      ckv::JoinPolicyNames("|", /*with_evaluation_only=*/false),
      "] [KV flags]\n", kUsageLimits, "KV flags (defaults of a session):\n  ",
      ckv::settings::KvRequestFlagsUsage());
}

// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread started
// later, so that only WaitForSignal receives them.
sigset_t BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int WaitForSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(Usage());
  ckv::server::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  auto config = ckv::server::ServerConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "error: %s\n%s\n",
                 std::string(config.status().message()).c_str(),
                 Usage().c_str());
    return 2;
  }
  const sigset_t signals = BlockTerminationSignals();
  const auto metrics = ckv::server::ServerMetrics::Create();
  std::unique_ptr<ckv::server::http::MetricsEndpoint> metrics_endpoint;
  if (!config->metrics_address.empty()) {
    auto endpoint = ckv::server::http::MetricsEndpoint::Start(
        config->metrics_address, config->http,
        [m = metrics.get()] { return m->Serialize(); });
    if (!endpoint.ok()) {
      spdlog::error("metrics: {}", std::string(endpoint.status().message()));
      return 1;
    }
    metrics_endpoint = *std::move(endpoint);
    spdlog::info("metrics on http://{}/metrics (port {})",
                 config->metrics_address, metrics_endpoint->port());
  }
  auto server = ckv::server::ClusterKvServer::Start(*config, metrics.get());
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return 1;
  }
  if (auto http = ckv::server::http::StartHttpApi(**server); !http.ok()) {
    spdlog::error("{}", std::string(http.status().message()));
    (*server)->Drain(absl::ZeroDuration());
    return 1;
  }
  int sig = WaitForSignal(signals);
  for (; sig == SIGHUP; sig = WaitForSignal(signals)) {
    spdlog::info("received SIGHUP: reloading the tokens file");
    (void)(*server)->ReloadTokens();  // logs the outcome
  }
  spdlog::info("received {}: draining (grace {} s)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT",
               config->drain_grace_seconds);
  (*server)->Drain(absl::Seconds(config->drain_grace_seconds));
  server->reset();
  spdlog::info("exiting");
  return 0;
}
