#include "client/rpc_client.h"

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace ckv::client {
namespace {

// Where FromGrpc keeps the serialized google.rpc.Status.
constexpr char kStatusDetailsUrl[] = "type.googleapis.com/google.rpc.Status";

// Drains a Decode/Generate stream: tokens to the callback, the summary as
// the result.
absl::StatusOr<pb::DecodeSummary> ReadDecodeStream(
    grpc::ClientReader<pb::DecodeResponse>& reader,
    const TokenCallback& on_token) {
  pb::DecodeResponse response;
  std::optional<pb::DecodeSummary> summary;
  while (reader.Read(&response)) {
    if (response.has_token() && on_token) on_token(response.token());
    if (response.has_summary()) summary = response.summary();
  }
  if (auto s = FromGrpc(reader.Finish()); !s.ok()) return s;
  if (!summary) return absl::InternalError("stream ended without a summary");
  return *summary;
}

absl::Status ReadPrefillStream(
    grpc::ClientReaderWriter<pb::PrefillRequest, pb::PrefillResponse>& stream,
    const ProgressCallback& on_progress,
    std::optional<pb::PrefillSummary>* summary) {
  pb::PrefillResponse response;
  while (stream.Read(&response)) {
    if (response.has_progress() && on_progress)
      on_progress(response.progress());
    if (response.has_summary()) *summary = response.summary();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FromGrpc(const grpc::Status& s) {
  absl::Status status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
  if (!status.ok() && !s.error_details().empty()) {
    status.SetPayload(kStatusDetailsUrl, absl::Cord(s.error_details()));
  }
  return status;
}

std::optional<ErrorDetails> ErrorDetailsOf(const absl::Status& s) {
  const auto payload = s.GetPayload(kStatusDetailsUrl);
  google::rpc::Status status;
  if (!payload.has_value() || !status.ParseFromString(std::string(*payload))) {
    return std::nullopt;
  }
  ErrorDetails d;
  bool any_known = false;
  for (const auto& any : status.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info)) {
      d.reason = info.reason();
      d.domain = info.domain();
      d.metadata.insert(info.metadata().begin(), info.metadata().end());
      any_known = true;
    } else if (any.UnpackTo(&retry)) {
      d.retry_delay_seconds =
          retry.retry_delay().seconds() + retry.retry_delay().nanos() * 1e-9;
      any_known = true;
    }
  }
  if (!any_known) return std::nullopt;
  return d;
}

std::string DescribeErrorDetails(const absl::Status& s) {
  const auto d = ErrorDetailsOf(s);
  if (!d.has_value()) return "";
  std::string out =
      absl::StrCat(" (reason ", d->reason.empty() ? "-" : d->reason);
  if (d->retry_delay_seconds >= 0) {
    absl::StrAppend(&out, ", retry after ", d->retry_delay_seconds, " s");
  }
  return out + ")";
}

const char* ServingStatusName(ServingStatus s) {
  switch (s) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

RpcClient::RpcClient(std::shared_ptr<grpc::Channel> channel,
                     double timeout_seconds, std::string token)
    : channel_(std::move(channel)),
      stub_(pb::ClusterKv::NewStub(channel_)),
      timeout_seconds_(timeout_seconds),
      token_(std::move(token)) {}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelSecurity& security) {
  if (!security.tls) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = security.ca_pem;
  ssl.pem_cert_chain = security.cert_pem;
  ssl.pem_private_key = security.key_pem;
  grpc::ChannelArguments args;
  if (!security.server_name.empty()) {
    args.SetSslTargetNameOverride(security.server_name);
  }
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(ssl), args);
}

std::unique_ptr<RpcClient> RpcClient::Connect(const std::string& address,
                                              double timeout_seconds,
                                              const ChannelSecurity& security) {
  return std::make_unique<RpcClient>(NewChannel(address, security),
                                     timeout_seconds, security.token);
}

std::unique_ptr<grpc::ClientContext> RpcClient::NewContext(
    const std::string& session_id) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (timeout_seconds_ > 0) {
    context->set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(timeout_seconds_)));
  }
  if (!session_id.empty()) {
    context->AddMetadata(kSessionIdMetadata, session_id);
  }
  if (!token_.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", token_));
  }
  return context;
}

// A fresh random routing key for CreateSession: behind a session-affine
// proxy it picks the replica, and the server starts the new session's id
// with it, so later calls carrying the id reach the same replica
// (deploy/README.md "Session affinity").
namespace {
std::string NewRoutingKey() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat(absl::Hex(rng(), absl::kZeroPad16));
}
}  // namespace

// UNAVAILABLE (the key's replica is down, or draining) created nothing, so
// CreateSession is retried with a fresh key, landing on another replica.
absl::StatusOr<pb::SessionInfo> RpcClient::CreateSession(
    const pb::CreateSessionRequest& request) {
  constexpr int kAttempts = 3;
  absl::Status status;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto context = NewContext(NewRoutingKey());
    pb::SessionInfo info;
    status = FromGrpc(stub_->CreateSession(context.get(), request, &info));
    if (status.ok()) return info;
    if (!absl::IsUnavailable(status)) break;
  }
  return status;
}

absl::StatusOr<pb::PrefillSummary> RpcClient::Prefill(
    const std::string& session_id, Utf8ChunkReader& reader,
    std::optional<bool> add_bos, const ProgressCallback& on_progress) {
  auto context = NewContext(session_id);
  auto stream = stub_->Prefill(context.get());
  std::optional<pb::PrefillSummary> summary;
  std::thread read_thread(
      [&] { ReadPrefillStream(*stream, on_progress, &summary).IgnoreError(); });
  absl::Status input_status;
  pb::PrefillRequest request;
  request.set_session_id(session_id);
  if (add_bos) request.set_add_bos(*add_bos);
  std::string chunk;
  bool sent_any = false;
  while (true) {
    auto more = reader.Next(&chunk);
    if (!more.ok()) input_status = more.status();
    if (!more.ok() || !*more) break;
    request.set_text(std::move(chunk));
    if (!stream->Write(request)) break;  // the server ended the call
    request.Clear();
    sent_any = true;
  }
  if (input_status.ok() && !sent_any) stream->Write(request);  // names it
  if (!input_status.ok()) context->TryCancel();
  stream->WritesDone();
  read_thread.join();
  const absl::Status rpc_status = FromGrpc(stream->Finish());
  if (!input_status.ok()) return input_status;
  if (!rpc_status.ok()) return rpc_status;
  if (!summary) return absl::InternalError("stream ended without a summary");
  return *summary;
}

absl::StatusOr<pb::PrefillSummary> RpcClient::PrefillMessages(
    const std::string& session_id, const pb::ChatMessages& messages,
    const ProgressCallback& on_progress) {
  auto context = NewContext(session_id);
  auto stream = stub_->Prefill(context.get());
  pb::PrefillRequest request;
  request.set_session_id(session_id);
  *request.mutable_messages() = messages;
  stream->Write(request);
  stream->WritesDone();
  std::optional<pb::PrefillSummary> summary;
  ReadPrefillStream(*stream, on_progress, &summary).IgnoreError();
  const absl::Status rpc_status = FromGrpc(stream->Finish());
  if (!rpc_status.ok()) return rpc_status;
  if (!summary) return absl::InternalError("stream ended without a summary");
  return *summary;
}

absl::StatusOr<pb::DecodeSummary> RpcClient::Decode(
    const pb::DecodeRequest& request, const TokenCallback& on_token) {
  auto context = NewContext(request.session_id());
  auto reader = stub_->Decode(context.get(), request);
  return ReadDecodeStream(*reader, on_token);
}

absl::StatusOr<pb::DecodeSummary> RpcClient::Generate(
    const pb::GenerateRequest& request, const TokenCallback& on_token) {
  auto context = NewContext("");
  auto reader = stub_->Generate(context.get(), request);
  return ReadDecodeStream(*reader, on_token);
}

absl::StatusOr<pb::SessionInfo> RpcClient::ForkSession(
    const std::string& session_id) {
  auto context = NewContext(session_id);
  pb::ForkSessionRequest request;
  request.set_session_id(session_id);
  pb::SessionInfo info;
  auto s = FromGrpc(stub_->ForkSession(context.get(), request, &info));
  if (!s.ok()) return s;
  return info;
}

absl::StatusOr<pb::SessionInfo> RpcClient::GetSession(
    const std::string& session_id) {
  auto context = NewContext(session_id);
  pb::GetSessionRequest request;
  request.set_session_id(session_id);
  pb::SessionInfo info;
  auto s = FromGrpc(stub_->GetSession(context.get(), request, &info));
  if (!s.ok()) return s;
  return info;
}

absl::StatusOr<pb::ListSessionsResponse> RpcClient::ListSessions() {
  auto context = NewContext("");
  pb::ListSessionsResponse response;
  auto s = FromGrpc(stub_->ListSessions(context.get(), {}, &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<pb::CloseSessionResponse> RpcClient::CloseSession(
    const std::string& session_id) {
  auto context = NewContext(session_id);
  pb::CloseSessionRequest request;
  request.set_session_id(session_id);
  pb::CloseSessionResponse response;
  auto s = FromGrpc(stub_->CloseSession(context.get(), request, &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<pb::ServerInfo> RpcClient::GetServerInfo() {
  auto context = NewContext("");
  pb::ServerInfo info;
  auto s = FromGrpc(stub_->GetServerInfo(context.get(), {}, &info));
  if (!s.ok()) return s;
  return info;
}

absl::StatusOr<pb::TokenizeResponse> RpcClient::Tokenize(
    const pb::TokenizeRequest& request) {
  auto context = NewContext("");
  pb::TokenizeResponse response;
  auto s = FromGrpc(stub_->Tokenize(context.get(), request, &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<pb::DetokenizeResponse> RpcClient::Detokenize(
    const pb::DetokenizeRequest& request) {
  auto context = NewContext("");
  pb::DetokenizeResponse response;
  auto s = FromGrpc(stub_->Detokenize(context.get(), request, &response));
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<pb::CancelSessionResponse> RpcClient::CancelSession(
    const std::string& session_id) {
  auto context = NewContext(session_id);
  pb::CancelSessionRequest request;
  request.set_session_id(session_id);
  pb::CancelSessionResponse response;
  auto s = FromGrpc(stub_->CancelSession(context.get(), request, &response));
  if (!s.ok()) return s;
  return response;
}

ServingStatus FromHealthProto(
    grpc::health::v1::HealthCheckResponse::ServingStatus status) {
  using Proto = grpc::health::v1::HealthCheckResponse;
  static_assert(static_cast<int>(ServingStatus::kServing) == Proto::SERVING &&
                static_cast<int>(ServingStatus::kNotServing) ==
                    Proto::NOT_SERVING &&
                static_cast<int>(ServingStatus::kServiceUnknown) ==
                    Proto::SERVICE_UNKNOWN);
  // Values added to the protocol after this client was built: kUnknown.
  return Proto::ServingStatus_IsValid(status)
             ? static_cast<ServingStatus>(status)
             : ServingStatus::kUnknown;
}

absl::StatusOr<ServingStatus> RpcClient::HealthCheck(
    const std::string& service) {
  auto context = NewContext("");
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  auto s = FromGrpc(stub->Check(context.get(), request, &response));
  if (!s.ok()) return s;
  return FromHealthProto(response.status());
}

}  // namespace ckv::client
