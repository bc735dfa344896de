// Thin synchronous wrapper over the ClusterKv gRPC stub: deadlines, the
// x-session-id routing metadata, the bearer token, TLS channels, stream
// draining and grpc::Status -> absl::Status conversion. Thread-safe (one
// stub, one context per call).
#ifndef CLUSTERKV_CLIENT_RPC_CLIENT_H_
#define CLUSTERKV_CLIENT_RPC_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/text_stream.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace ckv::client {

namespace pb = ::clusterkv::v1;

// Metadata key that carries the session id on every call of a session.
inline constexpr char kSessionIdMetadata[] = "x-session-id";

// Same code and message; the binary error details (grpc-status-details-bin,
// a google.rpc.Status) are kept as a payload for ErrorDetailsOf.
absl::Status FromGrpc(const grpc::Status& s);

// What a server said about an error as data: google.rpc.ErrorInfo (e.g.
// reason "MAX_SESSIONS", domain "clusterkv.v1", metadata limit/max) and
// google.rpc.RetryInfo.
struct ErrorDetails {
  std::string reason, domain;
  std::map<std::string, std::string> metadata;
  double retry_delay_seconds = -1.0;  // < 0: no RetryInfo
};
// The details FromGrpc kept; nullopt when the server sent none.
std::optional<ErrorDetails> ErrorDetailsOf(const absl::Status& s);
// " (reason MAX_SESSIONS, retry after 5 s)", or "" without details.
std::string DescribeErrorDetails(const absl::Status& s);

using ProgressCallback = std::function<void(const pb::PrefillProgress&)>;
using TokenCallback = std::function<void(const pb::TokenEvent&)>;

// grpc.health.v1 serving states.
enum class ServingStatus {
  kUnknown = 0,
  kServing = 1,
  kNotServing = 2,
  kServiceUnknown = 3
};
const char* ServingStatusName(ServingStatus s);

// How to reach the server. PEM contents, not paths.
struct ChannelSecurity {
  bool tls = false;         // false: plain TCP (the other TLS fields unused)
  std::string ca_pem;       // roots that verify the server ("": defaults)
  std::string cert_pem;     // client certificate chain (mutual TLS)
  std::string key_pem;      // its private key
  std::string server_name;  // expected name in the server's certificate
  std::string token;        // "": none; else "authorization: Bearer TOKEN"
};

class RpcClient {
 public:
  // timeout_seconds: deadline of each call (0 = none). A non-empty `token`
  // is sent as "authorization: Bearer <token>" on every call.
  RpcClient(std::shared_ptr<grpc::Channel> channel, double timeout_seconds,
            std::string token = "");
  static std::unique_ptr<RpcClient> Connect(
      const std::string& address, double timeout_seconds,
      const ChannelSecurity& security = ChannelSecurity());

  absl::StatusOr<pb::SessionInfo> CreateSession(
      const pb::CreateSessionRequest& request);
  // Streams `reader`'s chunks, half-closes, and reads the progress events
  // (concurrently, on a second thread) until the summary.
  absl::StatusOr<pb::PrefillSummary> Prefill(
      const std::string& session_id, Utf8ChunkReader& reader,
      std::optional<bool> add_bos, const ProgressCallback& on_progress);
  // One Prefill message carrying chat messages (rendered by the server).
  absl::StatusOr<pb::PrefillSummary> PrefillMessages(
      const std::string& session_id, const pb::ChatMessages& messages,
      const ProgressCallback& on_progress);
  absl::StatusOr<pb::DecodeSummary> Decode(const pb::DecodeRequest& request,
                                           const TokenCallback& on_token);
  absl::StatusOr<pb::DecodeSummary> Generate(const pb::GenerateRequest& request,
                                             const TokenCallback& on_token);
  absl::StatusOr<pb::SessionInfo> ForkSession(const std::string& session_id);
  absl::StatusOr<pb::SessionInfo> GetSession(const std::string& session_id);
  absl::StatusOr<pb::ListSessionsResponse> ListSessions();
  absl::StatusOr<pb::CloseSessionResponse> CloseSession(
      const std::string& session_id);
  absl::StatusOr<pb::ServerInfo> GetServerInfo();
  absl::StatusOr<pb::TokenizeResponse> Tokenize(
      const pb::TokenizeRequest& request);
  absl::StatusOr<pb::DetokenizeResponse> Detokenize(
      const pb::DetokenizeRequest& request);
  absl::StatusOr<pb::CancelSessionResponse> CancelSession(
      const std::string& session_id);
  // grpc.health.v1.Health/Check (proto/grpc/health/v1/health.proto).
  absl::StatusOr<ServingStatus> HealthCheck(const std::string& service);

 private:
  // A context with the deadline and, when non-empty, the session metadata.
  std::unique_ptr<grpc::ClientContext> NewContext(
      const std::string& session_id) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ClusterKv::Stub> stub_;
  double timeout_seconds_;
  std::string token_;
};

// A channel to `address` with TLS or plain TCP per `security`.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelSecurity& security);

// The client's view of a grpc.health.v1 status; kUnknown for UNKNOWN and
// for values newer than this client.
ServingStatus FromHealthProto(
    grpc::health::v1::HealthCheckResponse::ServingStatus status);

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_RPC_CLIENT_H_
