// Command-line flags of clusterkv-server -> ServerConfig. Every default comes
// from the ServerConfig / ServerLimits / KvStoreConfig structs.
#pragma once

#include "absl/status/statusor.h"
#include "server/server_config.h"

namespace ckv::server {

// Rewrites "--foo-bar[=v]" to "--foo_bar[=v]" in place so that the documented
// dashed spellings reach the absl flags (call before absl::ParseCommandLine).
void DashesToUnderscores(int argc, char** argv);

// Reads every flag (after absl::ParseCommandLine). INVALID_ARGUMENT naming
// the flag on a bad value; --model is required; a non-loopback --listen
// without TLS needs --insecure (ValidateTransportSecurity).
absl::StatusOr<ServerConfig> ServerConfigFromFlags();

}  // namespace ckv::server
