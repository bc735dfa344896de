#include "server/status_util.h"

namespace ckv::server {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(s.code());
  // absl and gRPC both use the canonical codes 0..16; anything else is a bug
  // in the callee and reported as INTERNAL rather than passed through.
  const grpc::StatusCode g = (code > 0 && code <= 16)
                                 ? static_cast<grpc::StatusCode>(code)
                                 : grpc::StatusCode::INTERNAL;
  return grpc::Status(g, std::string(s.message()));
}

std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace ckv::server
