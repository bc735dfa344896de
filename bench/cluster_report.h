// Results of cluster_bench: one record per measured configuration, the
// stdout summary, the targets of the issue checked against the measured
// figures, and the JSON ({"runs": [...], "machine": {...}, ...}).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bench/cluster_options.h"
#include "kernels/cpu/cluster_ops.h"
#include "model/kv/kv_config.h"
#include "nlohmann/json.hpp"

namespace ckv::bench {

using Json = nlohmann::ordered_json;

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();

// One configuration. Unmeasured fields stay NaN and are written as null.
struct RunRecord {
  std::string workload;    // "keys" or "engine"
  std::string experiment;  // keys: "recall" or "layer_timing"; "decode"
  std::string policy;      // full | clusterkv | clusterkv_kvhead | quest |
                           // streaming
  int64_t context = 0;
  int budget = 0;  // 0: none (full)
  int batch = 1;
  double step_ms = kNotMeasured;     // per (batch) step
  double select_ms = kNotMeasured;   // Select calls (plan + cache) per step
  double cluster_ms = kNotMeasured;  // k-means CPU time of the prefill
  double prefill_ms = kNotMeasured;
  double topk_recall = kNotMeasured;
  double mass_recall = kNotMeasured;
  double output_rel_err = kNotMeasured;
  Json extra = Json::object();  // workload-specific fields
};

struct ClusterReport {
  const ClusterBenchOptions* options = nullptr;
  int threads = 0;
  Json engine_model = nullptr;  // shape of the engine's model
  Json text_model = nullptr;    // the text workload's model and text
  std::vector<RunRecord> runs;
  double wall_seconds = 0;
};

// The metric's name in records and flags: cosine, l2, ip.
inline const char* MetricName(ClusterMetric m) {
  switch (m) {
    case ClusterMetric::kL2:
      return "l2";
    case ClusterMetric::kInnerProduct:
      return "ip";
    default:
      return "cosine";
  }
}

// Measured value or JSON null.
inline Json Num(double x) { return std::isfinite(x) ? Json(x) : Json(); }

void PrintRecord(const RunRecord& r, std::FILE* out);
void PrintSummary(const ClusterReport& report, std::FILE* out);
Json ReportJson(const ClusterReport& report);

}  // namespace ckv::bench
