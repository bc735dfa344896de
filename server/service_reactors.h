// Factories of the streaming reactors (server/service_decode.cc,
// server/service_prefill.cc). Internal to the service.
#pragma once

#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "server/service_state.h"

namespace ckv::server {

grpc::ServerWriteReactor<clusterkv::v1::DecodeResponse>* NewDecodeReactor(
    ServiceState& state, grpc::CallbackServerContext* ctx,
    const clusterkv::v1::DecodeRequest& request);
grpc::ServerWriteReactor<clusterkv::v1::DecodeResponse>* NewGenerateReactor(
    ServiceState& state, grpc::CallbackServerContext* ctx,
    const clusterkv::v1::GenerateRequest& request);
grpc::ServerBidiReactor<clusterkv::v1::PrefillRequest,
                        clusterkv::v1::PrefillResponse>*
NewPrefillReactor(ServiceState& state, grpc::CallbackServerContext* ctx);

}  // namespace ckv::server
