// Typed configuration of clusterkv-server with every default in one place.
// Set from absl flags in server/flags.cc; nothing reads the environment.
#pragma once

#include <cstdint>
#include <string>

#include "model/backend/backend.h"
#include "model/gguf/file_memory.h"
#include "model/kv/kv_config.h"
#include "model/sampler.h"

namespace ckv::server {

struct ServerLimits {
  int max_sessions = 64;
  int64_t max_host_kv_bytes = int64_t{16} << 30;   // all sessions, host tier
  int64_t max_device_kv_bytes = int64_t{8} << 30;  // all working sets
  int64_t max_prompt_tokens = 131072;   // one Prefill/Decode/Generate input
  int64_t max_session_tokens = 131072;  // tokens a session may hold
  int max_chat_messages = 1024;         // messages of one request
  int max_queued_requests = 256;        // jobs waiting for the engine
  uint32_t session_idle_ttl_seconds = 3600;
  // Per tenant (server/auth.h); 0: only the server-wide limits apply.
  int tenant_max_sessions = 0;
  int64_t tenant_max_host_kv_bytes = 0;
  // Automatic prefix cache of session-less requests (server/prefix_cache.h):
  // host bytes it may hold (counted in max_host_kv_bytes and the tenant's
  // tenant_max_host_kv_bytes), 0: off; and its block size in tokens. 1 GiB
  // is 1/16 of the default max_host_kv_bytes: for an 8B-class model (128
  // KiB of KV per token) 8k tokens, one long document; for the demo model
  // (16 KiB per token) 64k tokens.
  int64_t prefix_cache_bytes = int64_t{1} << 30;
  int64_t prefix_cache_block_tokens = 512;
};

// TLS on the gRPC port. Empty cert_file: plain TCP.
struct TlsConfig {
  std::string cert_file;       // PEM certificate chain of the server
  std::string key_file;        // PEM private key of the server
  std::string client_ca_file;  // set: clients must present a cert it signed
  bool enabled() const { return !cert_file.empty(); }
};

// The HTTP API's transport (server/http/, docs/http-api.md).
struct HttpConfig {
  int io_threads = 2;  // event loops; every connection is served by one
  // A request's line and header must arrive within this (from its first
  // byte), its body within body_timeout_seconds after the header: else 408.
  int header_timeout_seconds = 10;
  int body_timeout_seconds = 30;
  int idle_timeout_seconds = 30;     // keep-alive between requests
  int write_timeout_seconds = 60;    // a write (an SSE chunk) that stalls
  int64_t max_uri_bytes = 8192;      // 414
  int64_t max_header_bytes = 16384;  // request line and fields: 431
  int max_header_count = 100;        // 431
  int64_t max_body_bytes = int64_t{16} << 20;  // 413
  int max_connections = 4096;  // open at once; more are closed with 503
  int max_connections_per_address = 512;  // per client IP: 429
  // Most choices (`n`) one completion request may ask for: 400 beyond.
  int max_choices = 16;
};

struct ServerConfig {
  std::string model_path;
  // Where the weights live (model/gguf/file_memory.h): auto copies them
  // into transparent huge pages when the file is >= 64 MiB and at most
  // half of the available memory (faster decode; a private copy per
  // process), map shares the page cache between processes.
  gguf::FileMemory weights_memory = gguf::FileMemory::kAuto;
  std::string listen_address = "127.0.0.1:50051";
  std::string metrics_address = "127.0.0.1:9464";  // empty: no /metrics
  // Compute backend (model/backend/backend.h); auto: the best this build
  // has (today the CPU), logged at start and reported by GetServerInfo.
  BackendKind backend = BackendKind::kAuto;
  // CPU kernel table (kernels::cpu::SelectKernels): auto (the best exact
  // table for this CPU) | scalar | avx2 | avx512 | avx512_bf16 (prefill
  // GEMMs on BF16-rounded operands: about 2x faster, docs/design.md).
  std::string cpu_kernels = "auto";
  int threads = 0;  // 0: all cores
  // --backend fake: the fake device's schedule, size and seed (defaults:
  // BackendOptions').
  kernels::device::Schedule fake_schedule = BackendOptions{}.fake_schedule;
  int64_t fake_device_bytes = BackendOptions{}.fake_device_bytes;
  uint64_t fake_seed = BackendOptions{}.fake_seed;
  // Device backends: segment K,V residency and auto's budget (0: half the
  // device).
  KvResidency kv_residency = BackendOptions{}.kv_residency;
  int64_t resident_kv_bytes = BackendOptions{}.resident_kv_bytes;
  bool device_graphs = BackendOptions{}.device_graphs;
  // Device backends: attention rows to copy beyond this stream in chunks
  // of this size through two landing buffers.
  int64_t kv_stream_chunk_bytes = BackendOptions{}.kv_stream_chunk_bytes;
  int prefill_chunk = 256;  // tokens per prefill step
  // Engine time that input (prefills, questions) gets while sessions
  // decode (server/input_budget.h): 0 = fair (input jobs / active jobs),
  // (0, 1) = that fraction, 1 = every step takes prefill_chunk tokens.
  double prefill_share = 0.0;
  int drain_grace_seconds = 10;  // SIGTERM: finish streams this long
  // Threads that run unary RPCs (server/blocking_pool.h): snapshot files,
  // session restore and tokenizing never block a gRPC callback thread.
  int blocking_threads = 4;
  // Live recall telemetry (server/recall_sampler.h): one decode step in N
  // per session is measured against exact attention for one sparse layer;
  // 0: off. A sample reads every stored token of one layer, so its cost
  // grows with context while a sparse decode step's does not; measured by
  // bench/recall_probe_bench (default bench model, 2 threads): one sample
  // costs 0.9 decode steps at 8k tokens, 2.4 at 32k and 14.8 at 128k (the
  // default max_session_tokens). 2048 keeps the cost <= 1% of decode time up
  // to 128k (0.72%; 0.12% at 32k). A sample stalls its batch step for its
  // duration (~15 steps at 128k).
  int recall_sample_every = 2048;
  KvStoreConfig kv;         // default KV policy of new sessions
  SamplingParams sampling;  // default sampling of new sessions
  ServerLimits limits;
  // Durable sessions (server/session_snapshots.h): snapshots are written
  // here on drain, before idle expiry and on SnapshotSession, and restored
  // on first use after a restart. Empty: off.
  std::string snapshot_dir;
  TlsConfig tls;
  // Plain TCP on a non-loopback listen address needs this explicit opt-in.
  bool insecure = false;
  // "TOKEN TENANT" lines (server/auth.h); empty: no authentication, one
  // anonymous tenant. Reloaded on SIGHUP.
  std::string auth_tokens_file;
  // OpenAI-compatible HTTP API (docs/http-api.md), host:port (port 0:
  // ephemeral); empty: off. Same TLS files, tokens and loopback rule as
  // the gRPC port.
  std::string http_listen_address;
  HttpConfig http;
  // Tokens of context per sequence (prompt + generated); 0: the model
  // file's <arch>.context_length. Requests over it: 400
  // context_length_exceeded.
  int64_t context_length = 0;
};

}  // namespace ckv::server
