#include "server/limits.h"

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ckv::server {
namespace {

// The payload: "<Limit as int>:<max>".
constexpr char kLimitPayloadUrl[] = "type.clusterkv.v1/ckv.server.Limit";
constexpr int kLimitCount = static_cast<int>(Limit::kMaxChatMessages) + 1;

}  // namespace

const char* LimitName(Limit limit) {
  switch (limit) {
    case Limit::kMaxSessions:
      return "max_sessions";
    case Limit::kTenantMaxSessions:
      return "tenant_max_sessions";
    case Limit::kMaxQueuedRequests:
      return "max_queued_requests";
    case Limit::kMaxPromptTokens:
      return "max_prompt_tokens";
    case Limit::kMaxSessionTokens:
      return "max_session_tokens";
    case Limit::kMaxHostKvBytes:
      return "max_host_kv_bytes";
    case Limit::kTenantMaxHostKvBytes:
      return "tenant_max_host_kv_bytes";
    case Limit::kMaxDeviceKvBytes:
      return "max_device_kv_bytes";
    case Limit::kMaxChatMessages:
      return "max_chat_messages";
  }
  return "unknown_limit";
}

std::string LimitReason(Limit limit) {
  return absl::AsciiStrToUpper(LimitName(limit));
}

absl::Duration LimitRetryDelay(Limit limit) {
  switch (limit) {
    case Limit::kMaxQueuedRequests:
      return absl::Seconds(1);
    case Limit::kMaxHostKvBytes:
    case Limit::kTenantMaxHostKvBytes:
    case Limit::kMaxDeviceKvBytes:
      return absl::Seconds(2);
    case Limit::kMaxSessions:
    case Limit::kTenantMaxSessions:
      return absl::Seconds(5);
    case Limit::kMaxPromptTokens:
    case Limit::kMaxSessionTokens:
    case Limit::kMaxChatMessages:
      break;
  }
  return absl::ZeroDuration();
}

absl::Status LimitExceeded(Limit limit, int64_t max,
                           absl::string_view message) {
  absl::Status s = absl::ResourceExhaustedError(message);
  s.SetPayload(kLimitPayloadUrl,
               absl::Cord(absl::StrCat(static_cast<int>(limit), ":", max)));
  return s;
}

std::optional<LimitHit> LimitOf(const absl::Status& status) {
  if (!absl::IsResourceExhausted(status)) return std::nullopt;
  const auto payload = status.GetPayload(kLimitPayloadUrl);
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  const std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits(':', 1));
  int kind = -1;
  int64_t max = 0;
  if (!absl::SimpleAtoi(parts.first, &kind) || kind < 0 ||
      kind >= kLimitCount || !absl::SimpleAtoi(parts.second, &max)) {
    return std::nullopt;
  }
  return LimitHit{static_cast<Limit>(kind), max};
}

}  // namespace ckv::server
