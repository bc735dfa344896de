// Authentication of one ClusterKv call (internal to server/service*.cc):
// the `authorization: Bearer <token>` metadata resolved to a tenant through
// the server's TokenStore. grpc.health.v1 and reflection never come here.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"
#include "server/service_state.h"

namespace ckv::server {

// The caller's tenant: kAnonymousTenant when authentication is off;
// UNAUTHENTICATED for a missing, malformed or unknown token (the message
// never contains the token).
absl::StatusOr<std::string> CallerTenant(const ServiceState& state,
                                         const grpc::ServerContextBase& ctx);

}  // namespace ckv::server
