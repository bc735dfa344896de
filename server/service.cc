#include "server/service.h"

#include <string>
#include <utility>

#include "server/chat_input.h"
#include "server/request_log.h"
#include "server/service_auth.h"
#include "server/service_convert.h"
#include "server/service_reactors.h"
#include "server/status_util.h"

namespace ckv::server {
namespace {

// Runs `body(backend, record)` for a unary RPC of an authenticated caller
// (record.tenant) on the state's blocking pool, logs it and finishes. The
// body may block (disk, restore, tokenizing): it captures by value, as it
// runs after this returns; the request and response objects live until
// Finish.
template <class Body>
void RunUnary(ServiceState& state, grpc::CallbackServerContext* ctx,
              grpc::ServerUnaryReactor* reactor, const char* rpc,
              const std::string& session_id, Body& body) {
  RequestRecord rec;
  rec.rpc = rpc;
  rec.session_id = session_id;
  grpc::Status status;
  auto tenant = CallerTenant(state, *ctx);
  if (tenant.ok()) rec.tenant = *tenant;
  auto backend = state.Backend();
  if (!tenant.ok()) {
    status = ToGrpcStatus(tenant.status());
  } else if (!backend.ok()) {
    status = ToGrpcStatus(backend.status());
  } else {
    status = ToGrpcStatus(body(*backend, rec));
  }
  LogRequest(state.metrics(), rec, status);
  reactor->Finish(status);
}

template <class Body>
grpc::ServerUnaryReactor* Unary(ServiceState& state,
                                grpc::CallbackServerContext* ctx,
                                const char* rpc, std::string session_id,
                                Body body) {
  // DefaultReactor() constructs the reactor: call it exactly once.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto task = [&state, ctx, reactor, rpc, id = std::move(session_id),
               body = std::move(body)]() mutable {
    RunUnary(state, ctx, reactor, rpc, id, body);
  };
  // Only while the server shuts down is the pool closed: run here then.
  if (!state.blocking_pool().Post(task)) task();
  return reactor;
}

// The x-session-id metadata of a call ("" when absent): on CreateSession,
// the routing key the new session's id starts with (deploy/README.md).
std::string SessionIdMetadata(const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("x-session-id");
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

absl::Status RequireId(const std::string& id) {
  if (!id.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError("session_id is required");
}

}  // namespace

grpc::ServerUnaryReactor* ClusterKvService::CreateSession(
    grpc::CallbackServerContext* ctx, const v1::CreateSessionRequest* req,
    v1::SessionInfo* resp) {
  return Unary(
      state_, ctx, "CreateSession", "",
      [this, ctx, req, resp](const ServiceBackend& b, RequestRecord& rec) {
        SessionOptions o;
        auto kv = MergeKvConfig(state_.config().kv, req->kv(),
                                b.model->config.n_layers);
        if (!kv.ok()) return kv.status();
        auto sampling = MergeSampling(state_.config().sampling, req->sampling(),
                                      b.model->config.vocab_size);
        if (!sampling.ok()) return sampling.status();
        o.kv = *kv;
        o.sampling = *sampling;
        o.idle_ttl_seconds = req->idle_ttl_seconds();
        o.routing_key = std::string(RoutingKeyOf(SessionIdMetadata(ctx)));
        o.tenant = rec.tenant;
        auto s = b.sessions->Create(o);
        if (!s.ok()) {
          CountLimitRejection(state_.metrics(), s.status());
          return s.status();
        }
        rec.session_id = (*s)->id();
        FillSessionInfo(**s, resp);
        return absl::OkStatus();
      });
}

grpc::ServerBidiReactor<v1::PrefillRequest, v1::PrefillResponse>*
ClusterKvService::Prefill(grpc::CallbackServerContext* ctx) {
  return NewPrefillReactor(state_, ctx);
}

grpc::ServerWriteReactor<v1::DecodeResponse>* ClusterKvService::Decode(
    grpc::CallbackServerContext* ctx, const v1::DecodeRequest* req) {
  return NewDecodeReactor(state_, ctx, *req);
}

grpc::ServerWriteReactor<v1::DecodeResponse>* ClusterKvService::Generate(
    grpc::CallbackServerContext* ctx, const v1::GenerateRequest* req) {
  return NewGenerateReactor(state_, ctx, *req);
}

grpc::ServerUnaryReactor* ClusterKvService::ForkSession(
    grpc::CallbackServerContext* ctx, const v1::ForkSessionRequest* req,
    v1::SessionInfo* resp) {
  return Unary(state_, ctx, "ForkSession", req->session_id(),
               [this, req, resp](const ServiceBackend& b, RequestRecord& rec) {
                 if (auto s = RequireId(req->session_id()); !s.ok()) return s;
                 auto child = b.sessions->Fork(req->session_id(), rec.tenant);
                 if (!child.ok()) {
                   CountLimitRejection(state_.metrics(), child.status());
                   return child.status();
                 }
                 FillSessionInfo(**child, resp);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterKvService::GetSession(
    grpc::CallbackServerContext* ctx, const v1::GetSessionRequest* req,
    v1::SessionInfo* resp) {
  return Unary(state_, ctx, "GetSession", req->session_id(),
               [req, resp](const ServiceBackend& b, RequestRecord& rec) {
                 if (auto s = RequireId(req->session_id()); !s.ok()) return s;
                 auto session = b.sessions->Get(req->session_id(), rec.tenant);
                 if (!session.ok()) return session.status();
                 FillSessionInfo(**session, resp);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterKvService::ListSessions(
    grpc::CallbackServerContext* ctx, const v1::ListSessionsRequest*,
    v1::ListSessionsResponse* resp) {
  return Unary(state_, ctx, "ListSessions", "",
               [resp](const ServiceBackend& b, RequestRecord& rec) {
                 for (const auto& s : b.sessions->ListTenant(rec.tenant)) {
                   FillSessionInfo(*s, resp->add_sessions());
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterKvService::CloseSession(
    grpc::CallbackServerContext* ctx, const v1::CloseSessionRequest* req,
    v1::CloseSessionResponse* resp) {
  return Unary(state_, ctx, "CloseSession", req->session_id(),
               [req, resp](const ServiceBackend& b, RequestRecord& rec) {
                 if (auto s = RequireId(req->session_id()); !s.ok()) return s;
                 auto freed = b.sessions->Close(req->session_id(), rec.tenant);
                 if (!freed.ok()) return freed.status();
                 resp->set_freed_host_bytes(*freed);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterKvService::SnapshotSession(
    grpc::CallbackServerContext* ctx, const v1::SnapshotSessionRequest* req,
    v1::SnapshotSessionResponse* resp) {
  return Unary(state_, ctx, "SnapshotSession", req->session_id(),
               [req, resp](const ServiceBackend& b, RequestRecord& rec) {
                 if (auto s = RequireId(req->session_id()); !s.ok()) return s;
                 if (b.snapshots == nullptr) {
                   return absl::FailedPreconditionError(
                       "snapshots are off: start the server with "
                       "--snapshot-dir");
                 }
                 auto lease =
                     b.sessions->Acquire(req->session_id(), rec.tenant);
                 if (!lease.ok()) return lease.status();
                 auto r = b.snapshots->Save(*lease->get());
                 if (!r.ok()) return r.status();
                 resp->set_path(r->path);
                 resp->set_bytes(r->bytes);
                 resp->set_seconds(r->seconds);
                 return absl::OkStatus();
               });
}

// Answers while draining too (ServerInfo.draining says so).
grpc::ServerUnaryReactor* ClusterKvService::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest*,
    v1::ServerInfo* resp) {
  RequestRecord rec;
  rec.rpc = "GetServerInfo";
  const ServiceBackend b = state_.backend_unchecked();
  grpc::Status status;
  auto tenant = CallerTenant(state_, *ctx);
  if (tenant.ok()) rec.tenant = *tenant;
  if (!tenant.ok()) {
    status = ToGrpcStatus(tenant.status());
  } else if (b.model == nullptr) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "model is loading");
  } else {
    FillServerInfo(state_.config(), *b.model, *b.sessions, b.engine->stats(),
                   b.engine->backend_info(), state_.draining(), resp);
    resp->set_has_chat_template(b.chat != nullptr && b.chat->has_template());
  }
  LogRequest(state_.metrics(), rec, status);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* ClusterKvService::Tokenize(
    grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* req,
    v1::TokenizeResponse* resp) {
  return Unary(state_, ctx, "Tokenize", "",
               [req, resp](const ServiceBackend& b, RequestRecord&) {
                 return TokenizeText(*b.model->tokenizer, *req, resp);
               });
}

grpc::ServerUnaryReactor* ClusterKvService::Detokenize(
    grpc::CallbackServerContext* ctx, const v1::DetokenizeRequest* req,
    v1::DetokenizeResponse* resp) {
  return Unary(state_, ctx, "Detokenize", "",
               [req, resp](const ServiceBackend& b, RequestRecord&) {
                 return DetokenizeIds(*b.model, *req, resp);
               });
}

// OK with cancelled = false on an idle session: nothing to cancel is not an
// error (the call may have just ended).
grpc::ServerUnaryReactor* ClusterKvService::CancelSession(
    grpc::CallbackServerContext* ctx, const v1::CancelSessionRequest* req,
    v1::CancelSessionResponse* resp) {
  return Unary(state_, ctx, "CancelSession", req->session_id(),
               [req, resp](const ServiceBackend& b, RequestRecord& rec) {
                 if (auto s = RequireId(req->session_id()); !s.ok()) return s;
                 auto session = b.sessions->Get(req->session_id(), rec.tenant);
                 if (!session.ok()) return session.status();
                 resp->set_cancelled((*session)->CancelRunning());
                 return absl::OkStatus();
               });
}

}  // namespace ckv::server
