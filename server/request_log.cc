#include "server/request_log.h"

#include "server/status_util.h"
#include "spdlog/spdlog.h"

namespace ckv::server {
namespace {

bool IsServerFault(grpc::StatusCode c) {
  return c == grpc::StatusCode::INTERNAL || c == grpc::StatusCode::UNKNOWN ||
         c == grpc::StatusCode::DATA_LOSS;
}

}  // namespace

void LogRequest(ServerMetrics* metrics, const RequestRecord& r,
                const grpc::Status& status) {
  const std::string code = GrpcCodeName(status.error_code());
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - r.start)
                        .count();
  const double ttft_ms = r.ttft_seconds < 0 ? -1.0 : r.ttft_seconds * 1e3;
  const auto level = IsServerFault(status.error_code()) ? spdlog::level::warn
                                                        : spdlog::level::info;
  spdlog::log(level,
              "rpc={} session={} code={} input_tokens={} generated_tokens={} "
              "ttft_ms={:.1f} duration_ms={:.1f}{}{}{}{}",
              r.rpc, r.session_id.empty() ? "-" : r.session_id, code,
              r.input_tokens, r.generated_tokens, ttft_ms, ms,
              r.tenant.empty() ? "" : " tenant=", r.tenant,
              status.ok() ? "" : " message=",
              status.ok() ? "" : status.error_message());
  if (metrics != nullptr) metrics->RequestDone(r.rpc, code);
}

void LogInfo(const std::string& message) { spdlog::info("{}", message); }
void LogError(const std::string& message) { spdlog::error("{}", message); }

}  // namespace ckv::server
