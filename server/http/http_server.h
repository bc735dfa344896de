// The OpenAI-compatible HTTP API (docs/http-api.md) on --http-listen, served
// by the event-driven Boost.Beast transport (http_transport.h): GET
// /v1/models[/{id}], POST /v1/completions and /v1/chat/completions (JSON or
// server-sent events), /tokenize, /detokenize, /health, GET /metrics
// (Prometheus), and the status page: GET / (HTML) polling GET /v1/status.
// Same bearer tokens, tenants, TLS files, sessions, limits and metrics as
// the gRPC port.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/server_runner.h"

namespace ckv::server::http {

// Starts the API on server.config().http_listen_address and hands it to
// `server` (stopped by its drain, before the engine goes). Returns the bound
// port (0 when the address is empty: the API is off) and logs "http
// listening on HOST:PORT". INVALID_ARGUMENT for a malformed address or plain
// HTTP on a non-loopback address without --insecure; UNAVAILABLE when the
// port cannot be bound or the TLS files cannot be loaded.
absl::StatusOr<int> StartHttpApi(ClusterKvServer& server);

}  // namespace ckv::server::http
