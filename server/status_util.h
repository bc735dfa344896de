// The one place where absl::Status becomes grpc::Status (docs/design.md
// "Layers": the model layer never includes gRPC; the codes:
// docs/wire-contract.md "Status codes").
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "server/metrics.h"

namespace ckv::server {

// The error domain of google.rpc.ErrorInfo in this service's errors.
inline constexpr char kErrorDomain[] = "clusterkv.v1";

// Same code (the two enums share numbering) and message. A limit rejection
// (server/limits.h) also carries a google.rpc.Status in the binary error
// details (grpc-status-details-bin) with google.rpc.ErrorInfo (reason
// "MAX_SESSIONS", ..., domain kErrorDomain, metadata "limit" and "max") and,
// for limits that free up, google.rpc.RetryInfo.
grpc::Status ToGrpcStatus(const absl::Status& s);

// Counts a limit rejection in clusterkv_admission_rejected_total under the
// limit's name; nothing for other statuses or a null `metrics`.
void CountLimitRejection(ServerMetrics* metrics, const absl::Status& s);

// "OK", "INVALID_ARGUMENT", ... (metrics labels and log lines).
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace ckv::server
