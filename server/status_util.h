// The one place where absl::Status becomes grpc::Status (ARCHITECTURE.md
// "Wire contract": the model layer never includes gRPC).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ckv::server {

// Same code (the two enums share numbering) and message.
grpc::Status ToGrpcStatus(const absl::Status& s);

// "OK", "INVALID_ARGUMENT", ... (metrics labels and log lines).
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace ckv::server
