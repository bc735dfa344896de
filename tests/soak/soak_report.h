// Figures of a soak run: samples of the server's resident memory and KV
// bytes over time, the RSS trend (least-squares line over the second half
// of the run), the summary table and the JSON report.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/soak/soak_workload.h"

namespace ckv::soak {

struct Sample {
  double seconds = 0;         // since the start of the load
  int64_t rss_bytes = -1;     // -1: unknown (server not spawned)
  int64_t host_kv_bytes = 0;  // in use: limit - free
  int64_t device_kv_bytes = 0;
  int sessions = 0;
};

// KV capacity as GetServerInfo reports it.
struct Capacity {
  int free_sessions = 0;
  int64_t free_host_kv_bytes = 0;
  int64_t free_device_kv_bytes = 0;
  int queued_requests = 0;
  bool operator==(const Capacity&) const = default;
};

// Slope of the least-squares line through (seconds, rss) of the samples in
// the second half of the run, in MiB per hour; 0 with fewer than 3 samples.
double RssGrowthMiBPerHour(const std::vector<Sample>& samples);

struct SoakResult {
  int clients = 0;
  double seconds = 0;  // of load
  uint64_t seed = 0;
  Tally tally;
  std::vector<Sample> samples;
  Capacity baseline;  // before the load
  Capacity end;       // after every session was closed
  bool kv_bytes_baseline_ok = false;
  int sessions_left = 0;         // ListSessions after the run
  int snapshot_files_left = -1;  // -1: not checked
  int server_exit_code = -1;     // -1: not spawned (or not stopped)
  std::string failure;           // why the run failed ("" when it passed)
};

nlohmann::json ToJson(const SoakResult& r);
void PrintSummary(const SoakResult& r, std::ostream& out);

}  // namespace ckv::soak
