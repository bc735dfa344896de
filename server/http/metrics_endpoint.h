// Prometheus' text exposition on --metrics-address, served by the HTTP
// API's event-driven transport (http_transport.h) on one I/O thread of its
// own, without tokens (bind it to an address only the scraper reaches).
//
// Why not prometheus-cpp's Exposer: it serves on civetweb worker threads
// with a 100 KiB stack, and glibc carves every loaded library's static TLS
// (CUDA runtime, cuBLASLt, OpenBLAS: ~250 KiB together) out of each
// thread's stack, so the first scrape segfaulted (docs/building.md,
// pitfall 1). The transport's threads have the process' default stack
// (RLIMIT_STACK, 8 MiB on Debian); metrics_test checks it and scrapes with
// that TLS loaded.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/server_config.h"

namespace ckv::server::http {

class HttpTransport;

class MetricsEndpoint {
 public:
  // The body of GET /metrics. Runs on the endpoint's I/O thread, one call
  // at a time, and must not block (ServerMetrics::Serialize qualifies); an
  // exception is answered 500 with its message.
  using RenderFn = std::function<std::string()>;

  // Serving contract (HTTP/1.1, keep-alive, pipelining and the limits and
  // timeouts of `http`; io_threads is 1 whatever `http` says):
  //   GET|HEAD /metrics[?query] -> 200, text/plain; version=0.0.4
  //   GET|HEAD /                -> 200, a short text pointing at /metrics
  //   other paths               -> 404; other methods -> 405 (Allow header)
  //   malformed request         -> 400 and close (the transport's rules)
  // Errors of Start: INVALID_ARGUMENT for a malformed address (as
  // ParseListenAddress); UNAVAILABLE, naming the address, when it does not
  // resolve or cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address, const HttpConfig& http, RenderFn render);

  // Stops accepting, closes every connection, joins the I/O thread.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The bound TCP port (the ephemeral one when the address asked for 0).
  int port() const;

 private:
  explicit MetricsEndpoint(RenderFn render);
  const RenderFn render_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace ckv::server::http
