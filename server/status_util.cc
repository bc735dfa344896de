#include "server/status_util.h"

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "server/limits.h"

namespace ckv::server {
namespace {

// google.rpc.Status with ErrorInfo (and RetryInfo when a retry can succeed).
std::string LimitDetails(const absl::Status& s, const LimitHit& hit) {
  google::rpc::Status status;
  status.set_code(static_cast<int>(s.code()));
  status.set_message(std::string(s.message()));
  google::rpc::ErrorInfo info;
  info.set_reason(LimitReason(hit.limit));
  info.set_domain(kErrorDomain);
  (*info.mutable_metadata())["limit"] = LimitName(hit.limit);
  (*info.mutable_metadata())["max"] = std::to_string(hit.max);
  status.add_details()->PackFrom(info);
  const absl::Duration delay = LimitRetryDelay(hit.limit);
  if (delay > absl::ZeroDuration()) {
    google::rpc::RetryInfo retry;
    const int64_t ms = absl::ToInt64Milliseconds(delay);
    retry.mutable_retry_delay()->set_seconds(ms / 1000);
    retry.mutable_retry_delay()->set_nanos(static_cast<int>(ms % 1000) *
                                           1000000);
    status.add_details()->PackFrom(retry);
  }
  return status.SerializeAsString();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(s.code());
  // absl and gRPC both use the canonical codes 0..16; anything else is a bug
  // in the callee and reported as INTERNAL rather than passed through.
  const grpc::StatusCode g = (code > 0 && code <= 16)
                                 ? static_cast<grpc::StatusCode>(code)
                                 : grpc::StatusCode::INTERNAL;
  if (const auto hit = LimitOf(s); hit.has_value()) {
    return grpc::Status(g, std::string(s.message()), LimitDetails(s, *hit));
  }
  return grpc::Status(g, std::string(s.message()));
}

void CountLimitRejection(ServerMetrics* metrics, const absl::Status& s) {
  if (metrics == nullptr) return;
  if (const auto hit = LimitOf(s); hit.has_value()) {
    metrics->AdmissionRejected(LimitName(hit->limit));
  }
}

std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace ckv::server
