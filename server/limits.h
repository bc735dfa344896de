// The limits the server enforces, carried as data in the absl::Status of a
// rejection (a payload), so that gRPC error details, metrics and logs know
// which limit was hit without reading the message. No gRPC here: the
// engine and the session manager make these statuses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ckv::server {

enum class Limit {
  kMaxSessions,
  kTenantMaxSessions,
  kMaxQueuedRequests,
  kMaxPromptTokens,
  kMaxSessionTokens,
  kMaxHostKvBytes,
  kTenantMaxHostKvBytes,
  kMaxDeviceKvBytes,
  kMaxChatMessages,  // keep last (limits.cc counts the kinds)
};

// "max_sessions", ...: the flag's name, the metric label and the first word
// of the message.
const char* LimitName(Limit limit);
// "MAX_SESSIONS", ...: google.rpc.ErrorInfo.reason.
std::string LimitReason(Limit limit);
// How long a client should wait before retrying: limits that free up as
// other calls end or sessions close; 0 for requests that can never fit
// (max_prompt_tokens, max_session_tokens).
absl::Duration LimitRetryDelay(Limit limit);

struct LimitHit {
  Limit limit;
  int64_t max = 0;  // the configured limit
};

// RESOURCE_EXHAUSTED with `message` (which should start with the limit's
// name) and the hit limit attached.
absl::Status LimitExceeded(Limit limit, int64_t max, absl::string_view message);
// The limit attached by LimitExceeded; nullopt for any other status.
std::optional<LimitHit> LimitOf(const absl::Status& status);

}  // namespace ckv::server
