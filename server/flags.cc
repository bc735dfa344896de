#include "server/flags.h"

#include <limits>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/settings_schema.h"
#include "model/kv/policies/registry.h"
#include "server/input_budget.h"
#include "server/service_convert.h"
#include "server/transport_security.h"

namespace {
const ckv::server::ServerConfig kDefaults;
const ckv::server::ServerLimits& kLimits = kDefaults.limits;
const ckv::KvStoreConfig& kKv = kDefaults.kv;
}  // namespace

ABSL_FLAG(std::string, model, kDefaults.model_path, "GGUF model path");
ABSL_FLAG(std::string, weights_memory,
          ckv::gguf::FileMemoryName(kDefaults.weights_memory),
          "where the weights live: auto|map|huge-pages (auto: a private "
          "copy in transparent huge pages when that helps, else the mapped "
          "file; map: the page cache, shared by processes)");
ABSL_FLAG(std::string, listen, kDefaults.listen_address,
          "gRPC listen address host:port (port 0: ephemeral)");
ABSL_FLAG(std::string, metrics_address, kDefaults.metrics_address,
          "Prometheus /metrics address host:port (empty: off)");
ABSL_FLAG(std::string, http_listen, kDefaults.http_listen_address,
          "OpenAI-compatible HTTP API address host:port, e.g. "
          "127.0.0.1:8080 (empty: off)");
// The HTTP API's transport (HttpConfig).
ABSL_FLAG(int, http_io_threads, kDefaults.http.io_threads,
          "HTTP event-loop threads (every connection is served by one)");
ABSL_FLAG(int, http_header_timeout_seconds,
          kDefaults.http.header_timeout_seconds,
          "HTTP: a request line and header must arrive within this (408)");
ABSL_FLAG(int, http_body_timeout_seconds, kDefaults.http.body_timeout_seconds,
          "HTTP: a request body must arrive within this after its header "
          "(408)");
ABSL_FLAG(int, http_idle_timeout_seconds, kDefaults.http.idle_timeout_seconds,
          "HTTP: idle keep-alive connections are closed after this");
ABSL_FLAG(int, http_write_timeout_seconds, kDefaults.http.write_timeout_seconds,
          "HTTP: a connection whose client reads nothing for this is closed");
ABSL_FLAG(int64_t, http_max_uri_bytes, kDefaults.http.max_uri_bytes,
          "HTTP: longest request-target (414)");
ABSL_FLAG(int64_t, http_max_header_bytes, kDefaults.http.max_header_bytes,
          "HTTP: request line and header bytes at most (431)");
ABSL_FLAG(int, http_max_header_count, kDefaults.http.max_header_count,
          "HTTP: header fields at most (431)");
ABSL_FLAG(int64_t, http_max_body_bytes, kDefaults.http.max_body_bytes,
          "HTTP: request body bytes at most (413)");
ABSL_FLAG(int, http_max_connections, kDefaults.http.max_connections,
          "HTTP: open connections at most (more: 503 and closed)");
ABSL_FLAG(int, http_max_connections_per_address,
          kDefaults.http.max_connections_per_address,
          "HTTP: open connections per client IP at most (more: 429)");
ABSL_FLAG(int, http_max_choices, kDefaults.http.max_choices,
          "HTTP: most choices (`n`) per completion request (more: 400)");
ABSL_FLAG(int64_t, context_length, kDefaults.context_length,
          "tokens of context per sequence (prompt + completion); 0: the "
          "model file's context_length");
ABSL_FLAG(std::string, backend, ckv::BackendKindName(kDefaults.backend),
          "compute backend: auto|cpu|cuda|fake (auto: the best one this "
          "build has, logged; fake: the device backend on the fake device, "
          "for tests; cuda is not built yet)");
ABSL_FLAG(std::string, kernels, kDefaults.cpu_kernels,
          "CPU kernels: auto|scalar|avx2|avx512|avx512_bf16 (auto: the best "
          "exact table; avx512_bf16: prefill GEMMs on BF16-rounded operands, "
          "about 2x faster)");
ABSL_FLAG(int, threads, kDefaults.threads, "compute threads (0: all cores)");
ABSL_FLAG(std::string, fake_schedule,
          ckv::kernels::device::ScheduleName(kDefaults.fake_schedule),
          "--backend fake: how the fake device runs work: inline|lazy|threaded "
          "(docs/device-runtime.md)");
ABSL_FLAG(int64_t, fake_device_mb, kDefaults.fake_device_bytes >> 20,
          "--backend fake: the fake device's memory (MiB)");
ABSL_FLAG(uint64_t, fake_seed, kDefaults.fake_seed,
          "--backend fake: seed of phase thread orders and threaded delays");
ABSL_FLAG(std::string, kv_residency,
          ckv::KvResidencyName(kDefaults.kv_residency),
          "device backends: where closed segments' K,V live: "
          "auto|device|offload (auto: on the device while "
          "--resident-kv-mb lasts, then idle sessions' segments are evicted "
          "for active ones, else host only; device: always; offload: host "
          "only, selected rows recalled per step)");
ABSL_FLAG(int64_t, resident_kv_mb, kDefaults.resident_kv_bytes >> 20,
          "--kv-residency auto: device memory for resident segments (MiB; "
          "0: half the device)");
ABSL_FLAG(int64_t, kv_stream_chunk_mb, kDefaults.kv_stream_chunk_bytes >> 20,
          "device backends: an attention whose K,V rows to copy (segments "
          "not resident, e.g. a question after a long offloaded document) "
          "exceed this many MiB streams them in chunks of this size through "
          "two landing buffers (device memory: two chunks)");
ABSL_FLAG(bool, device_graphs, kDefaults.device_graphs,
          "device backends: replay the compute between attentions from "
          "graphs captured per layer region (false: launch every op)");
ABSL_FLAG(int, prefill_chunk, kDefaults.prefill_chunk,
          "tokens per prefill step");
ABSL_FLAG(double, prefill_share, kDefaults.prefill_share,
          "engine time that input (prefills, questions) gets while sessions "
          "decode: 0 = fair (each active job an equal share), (0,1) = that "
          "fraction, 1 = every step takes --prefill-chunk tokens");
ABSL_FLAG(int, drain_grace_seconds, kDefaults.drain_grace_seconds,
          "on SIGTERM: seconds running streams may take to finish");
ABSL_FLAG(int, blocking_threads, kDefaults.blocking_threads,
          "threads for unary RPC work that may block (snapshot files, "
          "session restore, tokenizing)");
ABSL_FLAG(int, recall_sample_every, kDefaults.recall_sample_every,
          "live recall telemetry: measure one decode step in N per session "
          "against exact attention (0: off)");
ABSL_FLAG(int, max_sessions, kLimits.max_sessions, "sessions at most");
ABSL_FLAG(int64_t, max_host_kv_bytes, kLimits.max_host_kv_bytes,
          "host-tier KV bytes of all sessions at most");
ABSL_FLAG(int64_t, max_device_kv_bytes, kLimits.max_device_kv_bytes,
          "working-set KV bytes of all sessions at most (device memory on a "
          "device backend; host memory on the CPU)");
ABSL_FLAG(int64_t, max_prompt_tokens, kLimits.max_prompt_tokens,
          "input tokens of one request at most");
ABSL_FLAG(int64_t, max_session_tokens, kLimits.max_session_tokens,
          "tokens one session may hold at most");
ABSL_FLAG(int, max_chat_messages, kLimits.max_chat_messages,
          "chat messages of one request at most");
ABSL_FLAG(int, max_queued_requests, kLimits.max_queued_requests,
          "jobs waiting for the engine at most");
ABSL_FLAG(uint32_t, session_idle_ttl_seconds, kLimits.session_idle_ttl_seconds,
          "idle sessions are closed after this long (default per session)");
ABSL_FLAG(int, tenant_max_sessions, kLimits.tenant_max_sessions,
          "sessions of one tenant at most (0: no per-tenant limit)");
ABSL_FLAG(int64_t, tenant_max_host_kv_bytes, kLimits.tenant_max_host_kv_bytes,
          "host-tier KV bytes of one tenant's sessions at most (0: none)");
ABSL_FLAG(int64_t, prefix_cache_bytes, kLimits.prefix_cache_bytes,
          "host bytes the automatic prefix cache of session-less requests "
          "may hold, counted in --max-host-kv-bytes (0: off)");
ABSL_FLAG(int64_t, prefix_cache_block_tokens, kLimits.prefix_cache_block_tokens,
          "tokens per prefix-cache block: session-less prompts are cached "
          "and reused in whole blocks");
ABSL_FLAG(std::string, tls_cert, kDefaults.tls.cert_file,
          "PEM certificate chain: serve gRPC over TLS (with --tls-key)");
ABSL_FLAG(std::string, tls_key, kDefaults.tls.key_file,
          "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, kDefaults.tls.client_ca_file,
          "PEM CA: require client certificates it signed (mutual TLS)");
ABSL_FLAG(bool, insecure, kDefaults.insecure,
          "allow plain TCP on a non-loopback --listen address");
ABSL_FLAG(std::string, auth_tokens_file, kDefaults.auth_tokens_file,
          "'TOKEN TENANT' lines: require 'authorization: Bearer TOKEN' on "
          "every ClusterKv call (reloaded on SIGHUP; empty: no auth)");
ABSL_FLAG(std::string, snapshot_dir, kDefaults.snapshot_dir,
          "folder of durable session snapshots (written on drain, idle "
          "expiry and SnapshotSession; restored on first use); empty: off");
// The KV defaults: one flag per request setting of the schema
// (common/settings_schema.h), its default from KvStoreConfig.
ABSL_FLAG(std::string, policy, ckv::KvPolicyName(kKv.policy),
          absl::StrCat("default KV policy: ",
                       ckv::JoinPolicyNames("|", false)));
ABSL_FLAG(std::string, gqa_selection, ckv::GqaSelectionName(kKv.gqa_selection),
          absl::StrCat("default ",
                       ckv::settings::JoinNames(
                           ckv::settings::kGqaSelectionNames, "|")));
// An engine-only setting of the schema (no wire field): the server's
// default for every session.
ABSL_FLAG(std::string, cache_mode, ckv::CacheModeName(kKv.cache_mode),
          absl::StrCat("default: ",
                       ckv::settings::KvSettingHelp("cache_mode")));
#define CKV_KV_FLAG(name, type, range, fork, help) \
  ABSL_FLAG(type, name, kKv.name, "default: " help);
CKV_KV_WIRE_NUMBERS(CKV_KV_FLAG)
#undef CKV_KV_FLAG

namespace ckv::server {
namespace {

absl::Status Positive(const char* flag, int64_t v) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be > 0"));
}

absl::Status ReadKvFlags(KvStoreConfig& kv, int64_t max_session_tokens) {
  // A server serves no evaluation-only policy (oracle), default included.
  auto policy = ParseServedKvPolicy(absl::GetFlag(FLAGS_policy));
  if (!policy.ok()) return policy.status();
  kv.policy = *policy;
  auto gqa = ParseGqaSelection(absl::GetFlag(FLAGS_gqa_selection));
  if (!gqa.ok()) return gqa.status();
  kv.gqa_selection = *gqa;
  auto mode = ParseCacheMode(absl::GetFlag(FLAGS_cache_mode));
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cache-mode: ", mode.status().message()));
  }
  kv.cache_mode = *mode;
#define CKV_READ(name, ...) kv.name = absl::GetFlag(FLAGS_##name);
  CKV_KV_WIRE_NUMBERS(CKV_READ)
#undef CKV_READ
  kv.max_tokens = max_session_tokens;
  // Checked as a request's settings would be (the request limits
  // included); dense_layers against the model once it is loaded.
  return MergeKvConfig(kv, v1::KvConfig(), std::numeric_limits<int>::max())
      .status();
}

absl::Status ReadLimitFlags(ServerLimits& l) {
  l.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  l.max_host_kv_bytes = absl::GetFlag(FLAGS_max_host_kv_bytes);
  l.max_device_kv_bytes = absl::GetFlag(FLAGS_max_device_kv_bytes);
  l.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  l.max_session_tokens = absl::GetFlag(FLAGS_max_session_tokens);
  l.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  l.max_chat_messages = absl::GetFlag(FLAGS_max_chat_messages);
  l.session_idle_ttl_seconds = absl::GetFlag(FLAGS_session_idle_ttl_seconds);
  l.prefix_cache_block_tokens = absl::GetFlag(FLAGS_prefix_cache_block_tokens);
  for (auto [flag, v] :
       {std::pair<const char*, int64_t>{"max-sessions", l.max_sessions},
        {"max-host-kv-bytes", l.max_host_kv_bytes},
        {"max-device-kv-bytes", l.max_device_kv_bytes},
        {"max-prompt-tokens", l.max_prompt_tokens},
        {"max-session-tokens", l.max_session_tokens},
        {"max-queued-requests", l.max_queued_requests},
        {"max-chat-messages", l.max_chat_messages},
        {"session-idle-ttl-seconds", l.session_idle_ttl_seconds},
        {"prefix-cache-block-tokens", l.prefix_cache_block_tokens}}) {
    if (auto s = Positive(flag, v); !s.ok()) return s;
  }
  l.tenant_max_sessions = absl::GetFlag(FLAGS_tenant_max_sessions);
  l.tenant_max_host_kv_bytes = absl::GetFlag(FLAGS_tenant_max_host_kv_bytes);
  if (l.tenant_max_sessions < 0 || l.tenant_max_host_kv_bytes < 0) {
    return absl::InvalidArgumentError(
        "--tenant-max-sessions and --tenant-max-host-kv-bytes must be >= 0");
  }
  l.prefix_cache_bytes = absl::GetFlag(FLAGS_prefix_cache_bytes);
  if (l.prefix_cache_bytes < 0) {
    return absl::InvalidArgumentError("--prefix-cache-bytes must be >= 0");
  }
  return absl::OkStatus();
}

absl::Status ReadHttpFlags(HttpConfig& h) {
  h.io_threads = absl::GetFlag(FLAGS_http_io_threads);
  h.header_timeout_seconds = absl::GetFlag(FLAGS_http_header_timeout_seconds);
  h.body_timeout_seconds = absl::GetFlag(FLAGS_http_body_timeout_seconds);
  h.idle_timeout_seconds = absl::GetFlag(FLAGS_http_idle_timeout_seconds);
  h.write_timeout_seconds = absl::GetFlag(FLAGS_http_write_timeout_seconds);
  h.max_uri_bytes = absl::GetFlag(FLAGS_http_max_uri_bytes);
  h.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  h.max_header_count = absl::GetFlag(FLAGS_http_max_header_count);
  h.max_body_bytes = absl::GetFlag(FLAGS_http_max_body_bytes);
  h.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  h.max_connections_per_address =
      absl::GetFlag(FLAGS_http_max_connections_per_address);
  h.max_choices = absl::GetFlag(FLAGS_http_max_choices);
  for (auto [flag, v] :
       {std::pair<const char*, int64_t>{"http-io-threads", h.io_threads},
        {"http-header-timeout-seconds", h.header_timeout_seconds},
        {"http-body-timeout-seconds", h.body_timeout_seconds},
        {"http-idle-timeout-seconds", h.idle_timeout_seconds},
        {"http-write-timeout-seconds", h.write_timeout_seconds},
        {"http-max-uri-bytes", h.max_uri_bytes},
        {"http-max-header-bytes", h.max_header_bytes},
        {"http-max-header-count", h.max_header_count},
        {"http-max-body-bytes", h.max_body_bytes},
        {"http-max-connections", h.max_connections},
        {"http-max-connections-per-address", h.max_connections_per_address},
        {"http-max-choices", h.max_choices}}) {
    if (auto s = Positive(flag, v); !s.ok()) return s;
  }
  if (h.max_header_bytes > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("--http-max-header-bytes is too large");
  }
  return absl::OkStatus();
}

absl::Status ReadSecurityFlags(ServerConfig& c) {
  c.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  c.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  c.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  c.insecure = absl::GetFlag(FLAGS_insecure);
  c.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  return ValidateTransportSecurity(c);
}

}  // namespace

absl::StatusOr<ServerConfig> ServerConfigFromFlags() {
  ServerConfig c;
  c.model_path = absl::GetFlag(FLAGS_model);
  auto weights_memory =
      gguf::ParseFileMemory(absl::GetFlag(FLAGS_weights_memory));
  if (!weights_memory.ok()) return weights_memory.status();
  c.weights_memory = *weights_memory;
  if (c.model_path.empty()) {
    return absl::InvalidArgumentError("--model is required");
  }
  c.listen_address = absl::GetFlag(FLAGS_listen);
  c.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  c.http_listen_address = absl::GetFlag(FLAGS_http_listen);
  auto backend = ParseBackendFlag(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) return backend.status();
  c.backend = *backend;
  c.cpu_kernels = absl::GetFlag(FLAGS_kernels);
  c.threads = absl::GetFlag(FLAGS_threads);
  if (c.threads < 0)
    return absl::InvalidArgumentError("--threads must be >= 0");
  if (!kernels::device::ParseSchedule(
          absl::GetFlag(FLAGS_fake_schedule).c_str(), &c.fake_schedule)) {
    return absl::InvalidArgumentError(
        "--fake-schedule must be inline, lazy or threaded");
  }
  const int64_t fake_mb = absl::GetFlag(FLAGS_fake_device_mb);
  if (fake_mb <= 0 || fake_mb > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        "--fake-device-mb must be in [1, 16777216]");
  }
  c.fake_device_bytes = fake_mb << 20;
  c.fake_seed = absl::GetFlag(FLAGS_fake_seed);
  auto residency = ParseKvResidency(absl::GetFlag(FLAGS_kv_residency));
  if (!residency.ok()) return residency.status();
  c.kv_residency = *residency;
  const int64_t resident_mb = absl::GetFlag(FLAGS_resident_kv_mb);
  if (resident_mb < 0 || resident_mb > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        "--resident-kv-mb must be in [0, 16777216]");
  }
  c.resident_kv_bytes = resident_mb << 20;
  const int64_t stream_mb = absl::GetFlag(FLAGS_kv_stream_chunk_mb);
  if (stream_mb < 1 || stream_mb > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        "--kv-stream-chunk-mb must be in [1, 1048576]");
  }
  c.kv_stream_chunk_bytes = stream_mb << 20;
  c.device_graphs = absl::GetFlag(FLAGS_device_graphs);
  c.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  if (auto s = Positive("prefill-chunk", c.prefill_chunk); !s.ok()) return s;
  c.prefill_share = absl::GetFlag(FLAGS_prefill_share);
  if (!IsPrefillShare(c.prefill_share)) {
    return absl::InvalidArgumentError("--prefill-share must be in [0, 1]");
  }
  c.snapshot_dir = absl::GetFlag(FLAGS_snapshot_dir);
  c.drain_grace_seconds = absl::GetFlag(FLAGS_drain_grace_seconds);
  if (c.drain_grace_seconds < 0) {
    return absl::InvalidArgumentError("--drain-grace-seconds must be >= 0");
  }
  c.blocking_threads = absl::GetFlag(FLAGS_blocking_threads);
  if (auto s = Positive("blocking-threads", c.blocking_threads); !s.ok()) {
    return s;
  }
  c.recall_sample_every = absl::GetFlag(FLAGS_recall_sample_every);
  if (c.recall_sample_every < 0) {
    return absl::InvalidArgumentError("--recall-sample-every must be >= 0");
  }
  if (auto s = ReadLimitFlags(c.limits); !s.ok()) return s;
  if (auto s = ReadHttpFlags(c.http); !s.ok()) return s;
  c.context_length = absl::GetFlag(FLAGS_context_length);
  if (c.context_length < 0) {
    return absl::InvalidArgumentError("--context-length must be >= 0");
  }
  if (auto s = ReadSecurityFlags(c); !s.ok()) return s;
  if (auto s = ReadKvFlags(c.kv, c.limits.max_session_tokens); !s.ok()) {
    return s;
  }
  return c;
}

}  // namespace ckv::server
