// The clusterkv.v1.ClusterKv gRPC service (callback API). Unary RPCs answer
// inline; Prefill, Decode and Generate are reactors that feed the engine
// loop and stream its events (server/stream_reactor.h). Until the backend is
// set (model loading) and once draining starts, new calls get UNAVAILABLE.
#pragma once

#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "server/service_state.h"

namespace ckv::server {

class ClusterKvService final
    : public clusterkv::v1::ClusterKv::CallbackService {
 public:
  // `state` must outlive the service and every call.
  explicit ClusterKvService(ServiceState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* CreateSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::CreateSessionRequest* req,
      clusterkv::v1::SessionInfo* resp) override;
  grpc::ServerBidiReactor<clusterkv::v1::PrefillRequest,
                          clusterkv::v1::PrefillResponse>*
  Prefill(grpc::CallbackServerContext* ctx) override;
  grpc::ServerWriteReactor<clusterkv::v1::DecodeResponse>* Decode(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::DecodeRequest* req) override;
  grpc::ServerWriteReactor<clusterkv::v1::DecodeResponse>* Generate(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::GenerateRequest* req) override;
  grpc::ServerUnaryReactor* ForkSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::ForkSessionRequest* req,
      clusterkv::v1::SessionInfo* resp) override;
  grpc::ServerUnaryReactor* GetSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::GetSessionRequest* req,
      clusterkv::v1::SessionInfo* resp) override;
  grpc::ServerUnaryReactor* ListSessions(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::ListSessionsRequest* req,
      clusterkv::v1::ListSessionsResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::CloseSessionRequest* req,
      clusterkv::v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::GetServerInfoRequest* req,
      clusterkv::v1::ServerInfo* resp) override;
  grpc::ServerUnaryReactor* SnapshotSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::SnapshotSessionRequest* req,
      clusterkv::v1::SnapshotSessionResponse* resp) override;
  grpc::ServerUnaryReactor* Tokenize(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::TokenizeRequest* req,
      clusterkv::v1::TokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* Detokenize(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::DetokenizeRequest* req,
      clusterkv::v1::DetokenizeResponse* resp) override;
  grpc::ServerUnaryReactor* CancelSession(
      grpc::CallbackServerContext* ctx,
      const clusterkv::v1::CancelSessionRequest* req,
      clusterkv::v1::CancelSessionResponse* resp) override;

 private:
  ServiceState& state_;
};

}  // namespace ckv::server
