// Command-line flags of clusterkv-server -> ServerConfig. Every default comes
// from the ServerConfig / ServerLimits / KvStoreConfig structs.
#pragma once

#include "absl/status/statusor.h"
#include "common/flag_spelling.h"
#include "server/server_config.h"

namespace ckv::server {

using ::ckv::DashesToUnderscores;  // common/flag_spelling.h

// Reads every flag (after absl::ParseCommandLine). INVALID_ARGUMENT naming
// the flag on a bad value; --model is required; a non-loopback --listen
// without TLS needs --insecure (ValidateTransportSecurity); a --backend this
// build does not have (cuda, fake) is INVALID_ARGUMENT.
absl::StatusOr<ServerConfig> ServerConfigFromFlags();

}  // namespace ckv::server
