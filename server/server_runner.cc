#include "server/server_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "model/model.h"
#include "server/admission.h"
#include "server/auth.h"
#include "server/chat_input.h"
#include "server/engine_loop.h"
#include "server/request_log.h"
#include "server/service.h"
#include "server/service_state.h"
#include "server/session_manager.h"
#include "server/session_snapshots.h"
#include "server/transport_security.h"

namespace ckv::server {
namespace {

constexpr char kServiceName[] = "clusterkv.v1.ClusterKv";
constexpr absl::Duration kJanitorPeriod = absl::Seconds(2);
// After the grace period: time for cancelled jobs to report before the gRPC
// server cancels what is left.
constexpr absl::Duration kCancelWait = absl::Seconds(5);

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

ClusterKvServer::ClusterKvServer(const ServerConfig& config) : config_(config) {
  if (config_.threads <= 0) {
    config_.threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
}

absl::StatusOr<std::unique_ptr<ClusterKvServer>> ClusterKvServer::Start(
    const ServerConfig& config, ServerMetrics* metrics) {
  if (auto st = ValidateTransportSecurity(config); !st.ok()) return st;
  if (auto st = CheckBackendBuilt(config.backend); !st.ok()) return st;
  if (!kernels::cpu::SelectKernels(config.cpu_kernels.c_str())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernels ", config.cpu_kernels, ": not available on this CPU (",
        kernels::cpu::DescribeCpuFeatures(), ")"));
  }
  std::unique_ptr<ClusterKvServer> s(new ClusterKvServer(config));
  if (!config.auth_tokens_file.empty()) {
    s->tokens_ = std::make_unique<TokenStore>(config.auth_tokens_file);
    if (auto st = s->tokens_->Reload(); !st.ok()) return st;
    LogInfo(absl::StrCat("authentication on: ", s->tokens_->tokens(),
                         " token(s) of ", s->tokens_->tenants(), " tenant(s)"));
  }
  if (auto st = s->StartGrpc(metrics); !st.ok()) return st;
  if (auto st = s->LoadBackend(); !st.ok()) {
    s->Drain(absl::ZeroDuration());
    return st;
  }
  s->janitor_ = std::thread([p = s.get()] { p->JanitorLoop(); });
  return s;
}

int64_t ClusterKvServer::engine_steps() const {
  return engine_ == nullptr ? 0 : engine_->stats().steps;
}

ClusterKvServer::~ClusterKvServer() { Drain(absl::ZeroDuration()); }

absl::Status ClusterKvServer::ReloadTokens() {
  if (tokens_ == nullptr) return absl::OkStatus();
  if (auto st = tokens_->Reload(); !st.ok()) {
    LogError(absl::StrCat("tokens reload failed, keeping the previous ones: ",
                          st.message()));
    return st;
  }
  LogInfo(absl::StrCat("tokens reloaded: ", tokens_->tokens(), " token(s) of ",
                       tokens_->tenants(), " tenant(s)"));
  return absl::OkStatus();
}

absl::Status ClusterKvServer::StartGrpc(ServerMetrics* metrics) {
  auto credentials = ServerCredentialsFor(config_.tls);
  if (!credentials.ok()) return credentials.status();
  state_ = std::make_unique<ServiceState>(config_, metrics, tokens_.get());
  service_ = std::make_unique<ClusterKvService>(state_.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen_address, *credentials, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", config_.listen_address, "'"));
  }
  SetHealth(false);
  LogInfo(absl::StrCat("listening on ", HostOf(config_.listen_address), ":",
                       port_,
                       !config_.tls.enabled()               ? " (plain TCP)"
                       : config_.tls.client_ca_file.empty() ? " (TLS)"
                                                            : " (mutual TLS)"));
  return absl::OkStatus();
}

absl::Status ClusterKvServer::LoadBackend() {
  LogInfo(absl::StrCat("loading model ", config_.model_path));
  auto model = LoadModel(config_.model_path, config_.weights_memory);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("cannot load model '", config_.model_path,
                                     "': ", model.status().message()));
  }
  model_ = *std::move(model);
  LogInfo(absl::StrCat("weights: ", model_->file->placed_bytes() >> 20,
                       " MiB, ",
                       model_->file->memory() == gguf::FileMemory::kHugePages
                           ? "copied into transparent huge pages"
                           : "mapped from the file",
                       " (--weights-memory ",
                       gguf::FileMemoryName(config_.weights_memory), ")"));
  worker_ = std::make_unique<ClusterWorker>();
  sessions_ = std::make_unique<SessionManager>(model_->config, config_.limits,
                                               worker_.get());
  if (auto st = OpenSnapshots(); !st.ok()) return st;
  admission_ =
      std::make_unique<Admission>(config_.limits, sessions_.get(),
                                  model_->config.n_layers, state_->metrics());
  TransformerOptions t;
  t.threads = config_.threads;
  t.prefill_chunk = config_.prefill_chunk;
  BackendOptions backend_options;
  backend_options.threads = config_.threads;
  backend_options.fake_schedule = config_.fake_schedule;
  backend_options.fake_device_bytes = config_.fake_device_bytes;
  backend_options.fake_seed = config_.fake_seed;
  backend_options.kv_residency = config_.kv_residency;
  backend_options.resident_kv_bytes = config_.resident_kv_bytes;
  backend_options.device_graphs = config_.device_graphs;
  backend_options.kv_stream_chunk_bytes = config_.kv_stream_chunk_bytes;
  auto backend = MakeBackend(config_.backend, backend_options);
  if (!backend.ok()) return backend.status();
  const BackendInfo info = (*backend)->info();
  sessions_->set_store_env((*backend)->store_env());
  LogInfo(absl::StrCat("backend ", info.name,
                       config_.backend == BackendKind::kAuto ? " (auto)" : "",
                       ": ", info.device, "; CPU kernels ",
                       kernels::cpu::KernelSetName()));
  if (!info.selection.empty()) LogInfo(info.selection);
  engine_ = std::make_unique<EngineLoop>(
      *model_, t, config_.limits.max_queued_requests, *std::move(backend),
      config_.prefill_share);
  // A sticky backend failure (a device error) fails every later step: the
  // server says so to health checks so that an orchestrator restarts it.
  engine_->SetBackendFailureListener([this](const absl::Status& s) {
    LogError(absl::StrCat("backend failed, health NOT_SERVING: ", s.message()));
    SetHealth(false);
  });
  StartRecallSampling();
  chat_ = std::make_unique<ChatRenderer>(*model_);
  if (!chat_->parse_error().empty()) {
    LogError(absl::StrCat("the model's chat template is not supported (",
                          chat_->parse_error(), "); chat messages refused"));
  }
  state_->SetBackend({model_.get(), sessions_.get(), engine_.get(),
                      admission_.get(), snapshots_.get(), chat_.get()});
  SetHealth(true);
  LogInfo(absl::StrCat("model loaded: ", model_->config.arch, ", ",
                       model_->config.n_layers, " layers, vocab ",
                       model_->config.vocab_size, "; serving"));
  return absl::OkStatus();
}

// Live recall telemetry (server/recall_sampler.h) into ServerMetrics.
void ClusterKvServer::StartRecallSampling() {
  ServerMetrics* m = state_->metrics();
  if (config_.recall_sample_every <= 0 || m == nullptr) return;
  m->AddRecallSeries(KvPolicyName(config_.kv.policy));
  engine_->SetRecallSampler(std::make_unique<RecallSampler>(
      config_.recall_sample_every,
      [m](absl::string_view policy, double topk, double mass) {
        m->ObserveRecall(policy, topk, mass);
      }));
}

absl::Status ClusterKvServer::OpenSnapshots() {
  if (config_.snapshot_dir.empty()) return absl::OkStatus();
  auto snapshots = SessionSnapshots::Open(
      config_.snapshot_dir, *model_, config_.limits.max_session_tokens,
      [](const std::string& m) { LogInfo(m); },
      [](const std::string& m) { LogError(m); });
  if (!snapshots.ok()) return snapshots.status();
  snapshots_ = *std::move(snapshots);
  sessions_->set_snapshots(snapshots_.get());
  LogInfo(absl::StrCat("snapshots in ", config_.snapshot_dir, ": ",
                       snapshots_->size(),
                       " session(s), restored when first used"));
  return absl::OkStatus();
}

void ClusterKvServer::AddFrontDoor(std::unique_ptr<FrontDoor> door) {
  front_doors_.push_back(std::move(door));
}

void ClusterKvServer::SetHealth(bool serving) {
  grpc::HealthCheckServiceInterface* health =
      server_ == nullptr ? nullptr : server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

void ClusterKvServer::BeginDrain() {
  if (state_ == nullptr || state_->draining()) return;
  state_->StartDraining();
  SetHealth(false);
  if (engine_ != nullptr) engine_->StopAccepting();
  LogInfo("draining: new calls are refused");
}

void ClusterKvServer::FinishDrain(absl::Duration grace) {
  if (drained_) return;
  drained_ = true;
  BeginDrain();
  if (state_ != nullptr && !state_->WaitStreamsDone(grace)) {
    LogInfo(absl::StrCat("drain: grace period over, cancelling ",
                         state_->active_streams(), " stream(s)"));
    if (engine_ != nullptr) engine_->CancelAll();
    state_->WaitStreamsDone(kCancelWait);
  }
  for (auto& door : front_doors_) door->Stop();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
  stop_janitor_.Notify();
  if (janitor_.joinable()) janitor_.join();
  SnapshotSessions();
  LogInfo("drained");
}

// Drain: every session that no call holds any more is written out.
void ClusterKvServer::SnapshotSessions() {
  if (snapshots_ == nullptr) return;
  const size_t sessions = sessions_->List().size();
  const auto t0 = std::chrono::steady_clock::now();
  const int saved = sessions_->SnapshotAll();
  LogInfo(absl::StrFormat(
      "drain: snapshotted %d of %d session(s) in %.3f s", saved, sessions,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count()));
}

void ClusterKvServer::JanitorLoop() {
  while (!stop_janitor_.WaitForNotificationWithTimeout(kJanitorPeriod)) {
    const int closed = sessions_->ExpireIdle(NowUnixMs());
    if (closed > 0) {
      LogInfo(absl::StrCat("expired ", closed, " idle session(s)"));
    }
    PublishGauges();
  }
}

void ClusterKvServer::PublishGauges() {
  ServerMetrics* m = state_->metrics();
  if (m == nullptr) return;
  const MemoryTotals t = sessions_->Totals();
  m->SetActiveSessions(t.sessions);
  m->SetKvBytes("host", t.host_bytes);
  m->SetKvBytes("device", t.device_bytes);
  const EngineStats e = engine_->stats();
  m->SetQueueDepth(e.queued);
  const Backend::Residency r = engine_->residency();
  m->SetResidentSegmentBytes(r.segment_bytes);
  m->AddResidencyChanges(r.evictions - last_residency_.evictions,
                         r.refusals - last_residency_.refusals);
  m->AddStreamedBytes(r.streamed_bytes - last_residency_.streamed_bytes);
  last_residency_ = r;
  const int64_t steps = e.steps - last_steps_;
  if (steps > 0) {
    // Mean tokens per step over the period.
    m->ObserveBatchSize(
        static_cast<int>((e.batched_tokens - last_batched_) / steps));
  }
  last_steps_ = e.steps;
  last_batched_ = e.batched_tokens;
}

}  // namespace ckv::server
