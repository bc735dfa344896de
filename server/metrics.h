// Prometheus metrics of the server (docs/metrics.md): `clusterkv_`
// prefix, base units (seconds, bytes), `_total` counters, histograms for
// latencies. Exposed over HTTP /metrics. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace ckv::server {

// Cumulative values of some counters and histograms, read from the
// registry's own objects (what the status page shows; server/status.h).
struct MetricsTotals {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t ttft_count = 0;  // requests that reached a first token
  double ttft_sum_seconds = 0.0;
  int64_t cache_lookups = 0;
  int64_t cache_hits = 0;
  // clusterkv_requests_total summed over rpcs, by code ("OK", ...).
  std::map<std::string, int64_t> requests_by_code;
  // clusterkv_admission_rejections_total by limit.
  std::map<std::string, int64_t> admission_rejections;
  // Each measure's observations (a NaN measure is dropped alone).
  struct Recall {
    int64_t topk_count = 0;
    double topk_sum = 0.0;  // sum of the observed recalls (0..1 each)
    int64_t mass_count = 0;
    double mass_sum = 0.0;
  };
  std::map<std::string, Recall> recall;  // by policy
};

class ServerMetrics {
 public:
  // The registry; Serialize() renders it. It serves nothing itself:
  // server/http/metrics_endpoint.h serves it on --metrics-address, the
  // HTTP API on its port's /metrics.
  static std::unique_ptr<ServerMetrics> Create();
  virtual ~ServerMetrics() = default;

  // clusterkv_requests_total{rpc, code}
  virtual void RequestDone(absl::string_view rpc, absl::string_view code) = 0;
  // clusterkv_admission_rejections_total{limit}
  virtual void AdmissionRejected(absl::string_view limit) = 0;
  // clusterkv_prompt_tokens_total, clusterkv_generated_tokens_total
  virtual void AddPromptTokens(int64_t n) = 0;
  virtual void AddGeneratedTokens(int64_t n) = 0;
  // Histograms: clusterkv_time_to_first_token_seconds,
  // clusterkv_inter_token_latency_seconds, clusterkv_prefill_duration_seconds,
  // clusterkv_clustering_duration_seconds,
  // clusterkv_selection_duration_seconds, clusterkv_batch_size,
  // clusterkv_attention_recall{policy, measure="topk"|"mass"} (sampled
  // recall of a decode step's selection, 0..1; server/recall_sampler.h).
  virtual void ObserveTimeToFirstToken(double seconds) = 0;
  virtual void ObserveInterTokenLatency(double seconds) = 0;
  virtual void ObservePrefill(double seconds) = 0;
  virtual void ObserveClustering(double seconds) = 0;
  virtual void ObserveSelection(double seconds) = 0;
  virtual void ObserveBatchSize(int n) = 0;
  // One sample of `policy` (a KvPolicyName): both measures are observed
  // (clamped to [0, 1]; NaN dropped).
  virtual void ObserveRecall(absl::string_view policy, double topk_recall,
                             double mass_recall) = 0;
  // Exports both recall series of `policy` at count 0, so that dashboards and
  // alerts see them before the first sample.
  virtual void AddRecallSeries(absl::string_view policy) = 0;
  // Gauges: clusterkv_sessions_active, clusterkv_queue_depth,
  // clusterkv_kv_bytes{tier="host"|"device"}.
  virtual void SetActiveSessions(int n) = 0;
  virtual void SetQueueDepth(int n) = 0;
  virtual void SetKvBytes(absl::string_view tier, int64_t bytes) = 0;
  // Device backends' segment residency (Backend::Residency):
  // clusterkv_kv_resident_segment_bytes (gauge),
  // clusterkv_kv_resident_evictions_total and
  // clusterkv_kv_resident_refusals_total (counters, by increments).
  virtual void SetResidentSegmentBytes(int64_t bytes) = 0;
  virtual void AddResidencyChanges(int64_t evictions, int64_t refusals) = 0;
  // clusterkv_kv_streamed_bytes_total: K,V bytes device backends streamed
  // through their landing buffers (--kv-stream-chunk-mb), by increments.
  virtual void AddStreamedBytes(int64_t bytes) = 0;
  // Counters: clusterkv_cache_lookups_total, clusterkv_cache_hits_total,
  // clusterkv_host_to_device_bytes_total.
  virtual void AddCacheLookups(int64_t lookups, int64_t hits) = 0;
  virtual void AddHostToDeviceBytes(int64_t bytes) = 0;
  // Counters: clusterkv_prefix_cache_hits_total,
  // clusterkv_prefix_cache_misses_total,
  // clusterkv_prefix_cache_reused_tokens_total (server/prefix_cache.h): one
  // lookup of a session-less request.
  virtual void AddPrefixCacheLookup(bool hit, int64_t reused_tokens) = 0;

  // Counter and histogram totals as numbers (no text round trip).
  virtual MetricsTotals Totals() const = 0;

  // The text exposition format of every metric (what /metrics serves).
  virtual std::string Serialize() const = 0;
};

}  // namespace ckv::server
