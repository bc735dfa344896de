// One log line and the request metrics per finished RPC. spdlog stays in the
// .cc (docs/building.md, pitfall 6: it is the most expensive header).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "grpcpp/support/status.h"
#include "server/metrics.h"

namespace ckv::server {

struct RequestRecord {
  std::string rpc;         // "Decode", "CreateSession", ...
  std::string session_id;  // empty when none
  std::string tenant;      // the caller's tenant; empty when anonymous
  int64_t input_tokens = 0;
  int64_t generated_tokens = 0;
  double ttft_seconds = -1.0;  // < 0: no token was generated
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
};

// Logs "rpc=... session=... code=... input_tokens=... generated_tokens=...
// ttft_ms=... duration_ms=...[ tenant=...][ message=...]" (warn level for
// server-side failures; never credentials; session, tenant and message
// escaped and cut by EscapeText, so client text cannot add a line) and
// counts clusterkv_requests_total{rpc, code}. `metrics` may be null.
void LogRequest(ServerMetrics* metrics, const RequestRecord& r,
                const grpc::Status& status);

// Log lines of the server outside requests (spdlog kept out of headers),
// escaped by EscapeText (at most kMaxLogLineBytes of `message`).
inline constexpr size_t kMaxLogLineBytes = 4096;
void LogInfo(const std::string& message);
void LogError(const std::string& message);

}  // namespace ckv::server
