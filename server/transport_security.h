// Transport security of the gRPC port: TLS (optionally mutual) from PEM
// files, and the rule that plain TCP is only the default on loopback.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/server_config.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc

namespace ckv::server {

// True for 127.0.0.0/8, ::1 and "localhost" (with or without ":port" and
// IPv6 brackets). Wildcards (0.0.0.0, [::]) and any other host are not.
bool IsLoopbackAddress(absl::string_view listen_address);

// INVALID_ARGUMENT naming the flag: --tls-cert without --tls-key (or the
// reverse), --tls-client-ca without --tls-cert, or a non-loopback
// --listen without TLS and without --insecure.
absl::Status ValidateTransportSecurity(const ServerConfig& config);

// TLS credentials from the files of `tls` (INVALID_ARGUMENT naming the flag
// when a file cannot be read or holds no PEM block), or insecure ones when
// TLS is off.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsConfig& tls);

}  // namespace ckv::server
