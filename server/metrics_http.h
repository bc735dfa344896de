// A minimal HTTP/1.x server for the Prometheus text exposition format.
//
// Why not prometheus-cpp's Exposer: it serves on civetweb worker threads with
// a 100 KiB stack, and glibc carves every loaded library's static TLS out of
// each thread's stack. In a binary that links the CUDA runtime, cuBLASLt or
// OpenBLAS that TLS alone exceeds 100 KiB, so the first scrape segfaults (or
// the CivetServer constructor fails). This server runs on one thread whose
// stack size it sets explicitly (kStackBytes, far above any TLS footprint),
// and it stops within milliseconds (the Exposer takes ~2 s).
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ckv::server {

class MetricsHttpServer {
 public:
  // Produces the body of GET /metrics. Called on the server thread, one call
  // at a time; it must be thread-safe with respect to the rest of the process.
  using RenderFn = std::function<std::string()>;

  // Stack of the serving thread: static TLS of CUDA/cuBLASLt/OpenBLAS is
  // ~250 KiB together; 8 MiB leaves room for any of them plus rendering.
  static constexpr size_t kStackBytes = size_t{8} << 20;

  // Binds and listens on `address` ("host:port"; host may be a name, an IPv4
  // literal, a bracketed IPv6 literal, or empty for all interfaces; port 0
  // picks an ephemeral port, see port()), then serves on a background thread
  // until destroyed.
  // Errors: INVALID_ARGUMENT for a malformed address; UNAVAILABLE (naming
  // the address and the OS error) when it cannot be resolved, bound (e.g.
  // the port is in use) or listened on, or the thread cannot start.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, RenderFn render);

  // Stops accepting, abandons a connection in progress, joins the thread.
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound TCP port (the ephemeral one when the address asked for 0).
  int port() const { return port_; }

  // Serving contract (one connection at a time, then close):
  //   GET|HEAD /metrics[?query] -> 200, text/plain; version=0.0.4
  //   GET|HEAD /                -> 200, a short text pointing at /metrics
  //   other paths               -> 404;  other methods -> 405 (Allow header)
  //   malformed or oversized (> kMaxRequestBytes) request -> 400
  // A client that sends no complete request head within kIoTimeoutMs, or
  // does not read the response within it, is dropped.
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr int kIoTimeoutMs = 5000;

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, int port, RenderFn render);

  static void* ThreadMain(void* self);
  void Serve();
  // Serves one accepted (non-blocking) connection; the caller closes it.
  void HandleConnection(int fd);
  // Reads one request head from `fd` and returns the complete response;
  // empty when the connection is to be dropped without one.
  std::string ReadRequest(int fd,
                          std::chrono::steady_clock::time_point deadline);

  const int listen_fd_;
  const int wake_fd_;  // eventfd: readable once the destructor asks to stop
  const int port_;
  const RenderFn render_;
  bool thread_started_ = false;
  pthread_t thread_{};
};

}  // namespace ckv::server
