#include "bench/service_inprocess.h"

#include <latch>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/backend/cpu/cpu_backend.h"

namespace ckv::bench {
namespace {

using server::JobResult;
using server::JobSpec;

// Leases `id` and wraps `input` into a job, as the gRPC reactors do.
absl::StatusOr<JobSpec> MakeJob(server::SessionManager& sessions,
                                const std::string& id,
                                const std::vector<int32_t>& input,
                                AppendKind kind, bool generate) {
  auto lease = sessions.Acquire(id);
  if (!lease.ok()) return lease.status();
  JobSpec spec;
  spec.sampling = (*lease)->sampling();
  spec.lease = *std::move(lease);
  spec.input = input;
  spec.kind = kind;
  spec.generate = generate;
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InProcessMode>> InProcessMode::Start(
    const server::ServerConfig& config) {
  std::unique_ptr<InProcessMode> m(new InProcessMode);
  auto model = LoadModel(config.model_path);
  if (!model.ok()) return model.status();
  m->model_ = *std::move(model);
  m->worker_ = std::make_unique<ClusterWorker>();
  m->sessions_ = std::make_unique<server::SessionManager>(
      m->model_->config, config.limits, m->worker_.get());
  TransformerOptions t;
  t.threads = config.threads;
  t.prefill_chunk = config.prefill_chunk;
  // As the server builds it (server_runner.cc), on the CPU backend.
  m->engine_ = std::make_unique<server::EngineLoop>(
      *m->model_, t, config.limits.max_queued_requests,
      std::make_unique<CpuBackend>(BackendOptions{.threads = config.threads}),
      config.prefill_share);
  return m;
}

// The engine (whose jobs hold sessions) goes before the sessions.
InProcessMode::~InProcessMode() { engine_.reset(); }

absl::StatusOr<std::vector<std::string>> InProcessMode::Prefill(
    const Workload& w) {
  const int n = w.sessions();
  std::vector<std::string> ids;
  server::SessionOptions so;
  so.kv = w.kv;
  so.sampling = w.sampling;
  for (int i = 0; i < n; ++i) {
    auto s = sessions_->Create(so);
    if (!s.ok()) return s.status();
    ids.push_back((*s)->id());
  }
  std::vector<absl::Status> status(n);
  std::latch done(n);
  for (int i = 0; i < n; ++i) {
    auto spec = MakeJob(*sessions_, ids[i], w.prompts[i], AppendKind::kPrompt,
                        /*generate=*/false);
    absl::Status error = spec.status();
    if (spec.ok()) {
      spec->callbacks.on_done = [&status, &done, i](const JobResult& r) {
        status[i] = r.status;
        done.count_down();
      };
      auto handle = engine_->Submit(*std::move(spec));
      if (handle.ok()) continue;
      error = handle.status();
    }
    status[i] = error;  // not submitted: no callback will come
    done.count_down();
  }
  done.wait();
  for (int i = 0; i < n; ++i) {
    if (!status[i].ok()) return status[i];
  }
  return ids;
}

absl::Status InProcessMode::Decode(const Workload& w,
                                   const std::vector<std::string>& ids,
                                   RawRun& run) {
  const int n = w.sessions();
  run.traces.assign(n, SessionTrace());
  std::latch done(n);
  const Usage before = ProcessUsage();
  run.decode_start = Clock::now();
  for (int i = 0; i < n; ++i) {
    SessionTrace& trace = run.traces[i];
    trace.tokens.reserve(w.sampling.max_tokens);
    trace.ids.reserve(w.sampling.max_tokens);
    trace.request = Clock::now();
    auto spec = MakeJob(*sessions_, ids[i], w.questions[i],
                        AppendKind::kGenerated, /*generate=*/true);
    if (!spec.ok()) {
      trace.status = spec.status();
      done.count_down();
      continue;
    }
    spec->sampling = w.sampling;
    spec->callbacks.on_token = [&trace](int32_t id, absl::string_view,
                                        const TokenLogprobs*) {
      if (id < 0) return;
      trace.tokens.push_back(Clock::now());
      trace.ids.push_back(id);
    };
    spec->callbacks.on_done = [&trace, &done](const JobResult& r) {
      trace.status = r.status;
      trace.finish = FinishReasonName(r.finish);
      done.count_down();
    };
    if (auto h = engine_->Submit(*std::move(spec)); !h.ok()) {
      trace.status = h.status();  // not submitted: no callback will come
      done.count_down();
    }
  }
  done.wait();
  run.decode_usage = ProcessUsage() - before;
  return absl::OkStatus();
}

absl::StatusOr<RawRun> InProcessMode::Run(const Workload& w) {
  RawRun run;
  run.prefill_start = Clock::now();
  auto ids = Prefill(w);
  if (!ids.ok()) return ids.status();
  run.prefill_end = Clock::now();
  const absl::Status s = Decode(w, *ids, run);
  for (const std::string& id : *ids) (void)sessions_->Close(id);
  if (!s.ok()) return s;
  return run;
}

}  // namespace ckv::bench
