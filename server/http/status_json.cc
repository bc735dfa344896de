#include "server/http/status_json.h"

#include <cmath>
#include <cstdint>

#include "nlohmann/json.hpp"

namespace ckv::server::http {
namespace {

using Json = nlohmann::json;
namespace v1 = ::clusterkv::v1;

// A number, or null for NaN (no value in that interval).
Json NumberOrNull(double v) { return std::isnan(v) ? Json() : Json(v); }

// hits / lookups, or null before the first lookup.
Json Rate(int64_t hits, int64_t lookups) {
  return lookups > 0 ? Json(static_cast<double>(hits) / lookups) : Json();
}

Json ModelJson(const v1::ModelInfo& m) {
  return {{"name", m.name()},
          {"path", m.path()},
          {"architecture", m.architecture()},
          {"layers", m.layers()},
          {"dim", m.dim()},
          {"heads", m.heads()},
          {"kv_heads", m.kv_heads()},
          {"vocab_size", m.vocab_size()},
          {"context_length", m.context_length()}};
}

Json SessionJson(const SessionStatus& s) {
  return {{"id", s.id},
          {"policy", s.policy},
          {"tokens", s.tokens},
          {"segments", s.segments},
          {"clustered_tokens", s.clustered_tokens},
          {"host_bytes", s.host_bytes},
          {"device_bytes", s.device_bytes},
          {"cache_hit_rate", Rate(s.cache_hits, s.cache_lookups)},
          {"busy", s.busy},
          {"idle_seconds", s.idle_seconds}};
}

Json SessionsJson(const ServerStatus& s) {
  Json list = Json::array();
  for (const SessionStatus& session : s.sessions) {
    list.push_back(SessionJson(session));
  }
  const v1::Limits& l = s.info.limits();
  return {{"count", s.totals.sessions},
          {"max", l.max_sessions()},
          {"host_bytes", s.totals.host_bytes},
          {"device_bytes", s.totals.device_bytes},
          {"max_host_bytes", l.max_host_kv_bytes()},
          {"max_device_bytes", l.max_device_kv_bytes()},
          {"yours", s.tenant_sessions},
          {"list", std::move(list)}};
}

Json AdmissionJson(const ServerStatus& s) {
  Json rejected = Json::object();
  int64_t rejected_total = 0;
  if (s.metrics.has_value()) {
    for (const auto& [limit, n] : s.metrics->admission_rejections) {
      rejected[limit] = n;
      rejected_total += n;
    }
  }
  return {{"admitted", s.admission.admitted},
          {"rejected", rejected_total},
          {"rejected_by_limit", std::move(rejected)},
          {"reserved_host_bytes", s.admission.reserved_host_bytes},
          {"reserved_device_bytes", s.admission.reserved_device_bytes}};
}

// Counters since start; null without metrics.
Json TotalsJson(const ServerStatus& s) {
  if (!s.metrics.has_value()) return Json();
  const MetricsTotals& m = *s.metrics;
  int64_t ok = 0, failed = 0;
  for (const auto& [code, n] : m.requests_by_code) {
    (code == "OK" ? ok : failed) += n;
  }
  return {{"prompt_tokens", m.prompt_tokens},
          {"generated_tokens", m.generated_tokens},
          {"requests_ok", ok},
          {"requests_failed", failed},
          {"ttft_mean_seconds",
           m.ttft_count > 0 ? Json(m.ttft_sum_seconds / m.ttft_count) : Json()},
          {"cache_hit_rate", Rate(m.cache_hits, m.cache_lookups)}};
}

Json RecallJson(const ServerStatus& s) {
  Json out = Json::array();
  if (!s.metrics.has_value()) return out;
  for (const auto& [policy, r] : s.metrics->recall) {
    out.push_back(
        {{"policy", policy},
         {"samples", r.topk_count},
         {"topk_mean",
          r.topk_count > 0 ? Json(r.topk_sum / r.topk_count) : Json()},
         {"mass_mean",
          r.mass_count > 0 ? Json(r.mass_sum / r.mass_count) : Json()}});
  }
  return out;
}

// Columns, oldest first.
Json HistoryJson(const ServerStatus& s) {
  Json t = Json::array(), in = Json::array(), dec = Json::array(),
       ttft = Json::array(), queue = Json::array(), sessions = Json::array();
  for (const StatusSample& x : s.history) {
    t.push_back(x.unix_ms);
    in.push_back(x.input_tokens_per_second);
    dec.push_back(x.decode_tokens_per_second);
    ttft.push_back(NumberOrNull(x.ttft_seconds));
    queue.push_back(x.queue_depth);
    sessions.push_back(x.sessions);
  }
  return {{"unix_ms", std::move(t)},
          {"input_tokens_per_second", std::move(in)},
          {"decode_tokens_per_second", std::move(dec)},
          {"ttft_seconds", std::move(ttft)},
          {"queue_depth", std::move(queue)},
          {"sessions", std::move(sessions)}};
}

}  // namespace

std::string StatusJson(const ServerStatus& s) {
  const v1::ServerInfo& info = s.info;
  Json j = {
      {"schema", kStatusSchemaVersion},
      {"time_unix_ms", s.unix_ms},
      {"version", info.version()},
      {"draining", info.draining()},
      {"model", ModelJson(info.model())},
      {"backend",
       {{"name", info.backend()},
        {"device", info.device_name()},
        {"device_memory_bytes", info.device_memory_bytes()},
        {"kernels", info.kernels()},
        {"threads", info.threads()},
        {"kv_policy", info.default_kv().policy()}}},
      {"sessions", SessionsJson(s)},
      {"queue",
       {{"queued", s.engine.queued},
        {"waiting_input", s.engine.waiting_input},
        {"active", s.engine.active},
        {"max_queued", info.limits().max_queued_requests()},
        {"steps", s.engine.steps}}},
      {"admission", AdmissionJson(s)},
      {"totals", TotalsJson(s)},
      {"recall", RecallJson(s)},
      {"history", HistoryJson(s)},
  };
  return j.dump();
}

}  // namespace ckv::server::http
