// The value of a listen flag (--http-listen, --metrics-address).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckv::server::http {

// A listen flag's value, "HOST:PORT": HOST an IPv4 literal, a bracketed
// IPv6 literal ("[::1]"), a name (resolved when binding) or empty (all IPv4
// interfaces); PORT 0..65535 (0: ephemeral).
struct ListenAddress {
  std::string host;  // brackets removed
  int port = 0;
};
// INVALID_ARGUMENT, naming `flag` (e.g. "--http-listen"), when malformed.
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag,
                                                 const std::string& address);

}  // namespace ckv::server::http
