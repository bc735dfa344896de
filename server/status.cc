#include "server/status.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "model/kv/kv_config.h"
#include "server/chat_input.h"
#include "server/service_convert.h"

namespace ckv::server {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The backend with every object the status reads, or an error.
absl::StatusOr<ServiceBackend> LoadedBackend(const ServiceState& state) {
  const ServiceBackend b = state.backend_unchecked();
  if (b.model == nullptr || b.sessions == nullptr || b.engine == nullptr ||
      b.admission == nullptr) {
    return absl::UnavailableError("model is loading");
  }
  return b;
}

SessionStatus StatusOf(const Session& s, int64_t now_ms) {
  const SessionView view = s.View();
  const SessionStats& st = view.stats;
  SessionStatus r;
  r.id = s.id();
  r.policy = KvPolicyName(s.kv().policy);
  r.tokens = st.tokens;
  r.segments = st.segments;
  r.clustered_tokens = st.clustered_tokens;
  r.host_bytes = st.memory.host_bytes;
  r.device_bytes = st.memory.working_set_bytes;
  r.cache_lookups = st.cache.lookups;
  r.cache_hits = st.cache.hits;
  r.busy = view.busy;
  r.idle_seconds =
      std::max<int64_t>(0, now_ms - view.last_used_unix_ms) / 1000.0;
  return r;
}

}  // namespace

absl::StatusOr<StatusCounters> ReadStatusCounters(const ServiceState& state) {
  auto b = LoadedBackend(state);
  if (!b.ok()) return b.status();
  StatusCounters c;
  c.unix_ms = NowUnixMs();
  c.steady_seconds = SteadySeconds();
  const EngineStats e = b->engine->stats();
  c.decoded_tokens = e.decoded_tokens;
  c.input_tokens = e.batched_tokens - e.decoded_tokens;
  c.queue_depth = e.queued + e.waiting_input;
  c.sessions = b->sessions->Totals().sessions;
  if (const ServerMetrics* m = state.metrics(); m != nullptr) {
    const MetricsTotals t = m->Totals();
    c.has_ttft = true;
    c.ttft_count = t.ttft_count;
    c.ttft_sum_seconds = t.ttft_sum_seconds;
  }
  return c;
}

StatusHistory::StatusHistory(int capacity) : capacity_(std::max(1, capacity)) {}

void StatusHistory::Record(const StatusCounters& now) {
  absl::MutexLock lock(&mu_);
  if (!last_.has_value()) {
    last_ = now;
    return;
  }
  const double dt = now.steady_seconds - last_->steady_seconds;
  if (!(dt > 0)) return;
  StatusSample s;
  s.unix_ms = now.unix_ms;
  s.input_tokens_per_second =
      std::max<int64_t>(0, now.input_tokens - last_->input_tokens) / dt;
  s.decode_tokens_per_second =
      std::max<int64_t>(0, now.decoded_tokens - last_->decoded_tokens) / dt;
  const int64_t finished = now.ttft_count - last_->ttft_count;
  if (now.has_ttft && last_->has_ttft && finished > 0) {
    s.ttft_seconds =
        (now.ttft_sum_seconds - last_->ttft_sum_seconds) / finished;
  }
  s.queue_depth = now.queue_depth;
  s.sessions = now.sessions;
  samples_.push_back(s);
  while (static_cast<int>(samples_.size()) > capacity_) samples_.pop_front();
  last_ = now;
}

std::vector<StatusSample> StatusHistory::Samples() const {
  absl::MutexLock lock(&mu_);
  return {samples_.begin(), samples_.end()};
}

absl::StatusOr<ServerStatus> CollectStatus(const ServiceState& state,
                                           absl::string_view tenant,
                                           int max_listed,
                                           const StatusHistory* history) {
  auto b = LoadedBackend(state);
  if (!b.ok()) return b.status();
  ServerStatus s;
  s.unix_ms = NowUnixMs();
  s.engine = b->engine->stats();
  FillServerInfo(state.config(), *b->model, *b->sessions, s.engine,
                 b->engine->backend_info(), state.draining(), &s.info);
  s.info.set_has_chat_template(b->chat != nullptr && b->chat->has_template());
  s.totals = b->sessions->Totals();
  s.prefix_cache = b->sessions->prefix_cache().stats();
  std::vector<std::shared_ptr<Session>> mine = b->sessions->ListTenant(tenant);
  s.tenant_sessions = static_cast<int>(mine.size());
  std::vector<std::pair<int64_t, const Session*>> recent;
  recent.reserve(mine.size());
  for (const auto& session : mine) {
    recent.emplace_back(session->last_used_unix_ms(), session.get());
  }
  std::stable_sort(
      recent.begin(), recent.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  recent.resize(std::min<size_t>(recent.size(), std::max(0, max_listed)));
  for (const auto& [used, session] : recent) {
    s.sessions.push_back(StatusOf(*session, s.unix_ms));
  }
  s.admission = b->admission->stats();
  if (const ServerMetrics* m = state.metrics(); m != nullptr) {
    s.metrics = m->Totals();
  }
  if (history != nullptr) s.history = history->Samples();
  return s;
}

}  // namespace ckv::server
