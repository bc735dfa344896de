#include "bench/service_grpc.h"

#include <chrono>
#include <latch>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/loopback_server.h"
#include "grpcpp/grpcpp.h"

namespace ckv::bench {
namespace {

namespace v1 = ::clusterkv::v1;
using Stub = v1::ClusterKv::Stub;

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    default:
      return "unspecified";
  }
}

v1::SamplingParams ToProto(const SamplingParams& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_seed(s.seed);
  p.set_max_tokens(s.max_tokens);
  return p;
}

absl::Status CreateSession(Stub& stub, const Workload& w, std::string* id) {
  grpc::ClientContext ctx;
  v1::CreateSessionRequest req;
  req.mutable_kv()->set_policy(KvPolicyName(w.kv.policy));
  req.mutable_kv()->set_budget(w.kv.budget);
  *req.mutable_sampling() = ToProto(w.sampling);
  v1::SessionInfo info;
  const grpc::Status s = stub.CreateSession(&ctx, req, &info);
  *id = info.session_id();
  return ToAbsl(s);
}

absl::Status Prefill(Stub& stub, const std::string& id,
                     const std::vector<int32_t>& prompt) {
  grpc::ClientContext ctx;
  auto stream = stub.Prefill(&ctx);
  v1::PrefillRequest req;
  req.set_session_id(id);
  req.mutable_tokens()->mutable_ids()->Add(prompt.begin(), prompt.end());
  stream->Write(req);
  stream->WritesDone();
  v1::PrefillResponse r;
  while (stream->Read(&r)) {
  }
  return ToAbsl(stream->Finish());
}

// The timed call: every TokenEvent with a token is timestamped when read.
absl::Status Decode(Stub& stub, const Workload& w, int i, const std::string& id,
                    SessionTrace& trace) {
  grpc::ClientContext ctx;
  v1::DecodeRequest req;
  req.set_session_id(id);
  const std::vector<int32_t>& q = w.questions[i];
  if (!q.empty()) req.mutable_tokens()->mutable_ids()->Add(q.begin(), q.end());
  *req.mutable_sampling() = ToProto(w.sampling);
  trace.tokens.reserve(w.sampling.max_tokens);
  trace.ids.reserve(w.sampling.max_tokens);
  trace.request = Clock::now();
  auto reader = stub.Decode(&ctx, req);
  v1::DecodeResponse r;
  while (reader->Read(&r)) {
    const Clock::time_point now = Clock::now();
    if (r.has_summary()) {
      trace.finish = FinishName(r.summary().finish_reason());
    } else if (r.token().id() >= 0) {
      trace.tokens.push_back(now);
      trace.ids.push_back(r.token().id());
    }
  }
  return ToAbsl(reader->Finish());
}

void CloseSession(Stub& stub, const std::string& id) {
  grpc::ClientContext ctx;
  v1::CloseSessionRequest req;
  req.set_session_id(id);
  v1::CloseSessionResponse resp;
  (void)stub.CloseSession(&ctx, req, &resp);
}

// The phases every client thread goes through together.
struct Phases {
  explicit Phases(int n) : prefilled(n), decoded(n) {}
  std::latch prefilled;
  std::latch go{1};
  std::latch decoded;
};

void ClientSession(Stub& stub, const Workload& w, int i, Phases& phases,
                   SessionTrace& trace) {
  std::string id;
  absl::Status s = CreateSession(stub, w, &id);
  if (s.ok()) s = Prefill(stub, id, w.prompts[i]);
  phases.prefilled.count_down();
  phases.go.wait();
  if (s.ok()) s = Decode(stub, w, i, id, trace);
  trace.status = s;
  phases.decoded.count_down();
  if (!id.empty()) CloseSession(stub, id);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcMode>> GrpcMode::Start(
    const server::ServerConfig& config, bool metrics, int channels) {
  std::unique_ptr<GrpcMode> m(new GrpcMode);
  if (metrics) {
    m->metrics_ = server::ServerMetrics::Create();
  }
  auto server = server::ClusterKvServer::Start(config, m->metrics_.get());
  if (!server.ok()) return server.status();
  m->server_ = *std::move(server);
  if (auto s = m->Connect(channels); !s.ok()) return s;
  return m;
}

GrpcMode::~GrpcMode() {
  stubs_.clear();
  server_.reset();  // drains before the metrics registry goes
}

absl::Status GrpcMode::Connect(int channels) {
  auto stubs = ConnectStubs(server_->port(), channels);
  if (!stubs.ok()) return stubs.status();
  stubs_ = *std::move(stubs);
  return absl::OkStatus();
}

absl::StatusOr<RawRun> GrpcMode::Run(const Workload& w) {
  const int n = w.sessions();
  if (n > static_cast<int>(stubs_.size())) {
    return absl::InvalidArgumentError("more sessions than channels");
  }
  RawRun run;
  run.traces.assign(n, SessionTrace());
  Phases phases(n);
  std::vector<std::thread> clients;
  run.prefill_start = Clock::now();
  for (int i = 0; i < n; ++i) {
    clients.emplace_back(ClientSession, std::ref(*stubs_[i]), std::cref(w), i,
                         std::ref(phases), std::ref(run.traces[i]));
  }
  phases.prefilled.wait();
  run.prefill_end = Clock::now();
  const Usage before = ProcessUsage();
  run.decode_start = Clock::now();
  phases.go.count_down();
  phases.decoded.wait();
  run.decode_usage = ProcessUsage() - before;
  for (std::thread& t : clients) t.join();
  return run;
}

}  // namespace ckv::bench
