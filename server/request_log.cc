#include "server/request_log.h"

#include "server/log_text.h"
#include "server/status_util.h"
#include "spdlog/spdlog.h"

namespace ckv::server {
namespace {

// A valid session id is at most 128 bytes; longer ones are cut here.
constexpr size_t kMaxLoggedIdBytes = 128;

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
              r.rpc,
              r.session_id.empty()
                  ? "-"
                  : EscapeLogField(r.session_id, kMaxLoggedIdBytes),
              code, r.input_tokens, r.generated_tokens, ttft_ms, ms,
              r.tenant.empty() ? "" : " tenant=", EscapeLogField(r.tenant),
              status.ok() ? "" : " message=",
              status.ok() ? "" : EscapeText(status.error_message()));
  if (metrics != nullptr) metrics->RequestDone(r.rpc, code);
}

void LogInfo(const std::string& message) {
  spdlog::info("{}", EscapeText(message, kMaxLogLineBytes));
}
void LogError(const std::string& message) {
  spdlog::error("{}", EscapeText(message, kMaxLogLineBytes));
}

}  // namespace ckv::server
