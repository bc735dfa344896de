// Medians over rounds, the gRPC-vs-in-process comparison (service overhead),
// the stdout table and the JSON of service_bench.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/service_options.h"
#include "bench/service_workload.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace ckv::bench {

// An in-process CPU share below this flags other load on the cores.
constexpr double kLowCpuShare = 0.9;

// The target: gRPC tokens/s within 5% of in-process at the largest
// session count.
constexpr double kOverheadTarget = 0.05;

struct ServiceReport {
  const ServiceBenchOptions* options = nullptr;
  const Model* model = nullptr;
  std::string model_path;
  bool random_model = false;
  int engine_threads = 0;
  std::vector<RunSample> samples;  // every (mode, sessions, round)
};

// Medians over the rounds of one mode at one session count.
struct ModeMedians {
  int rounds = 0;
  double tokens_per_second = 0.0;
  double prefill_tokens_per_second = 0.0;
  double ttft_p50_ms = 0.0, ttft_p99_ms = 0.0;
  double itl_p50_ms = 0.0, itl_p99_ms = 0.0;
  double cpu_ms_per_token = 0.0;    // process CPU over the decode phase
  double switches_per_token = 0.0;  // voluntary + involuntary
  // Process CPU / (decode wall time x engine threads): about 1 when the
  // engine had its cores; well below 1 means other load took them.
  double cpu_share = 0.0;
  int eos_sessions = 0;  // most over the rounds
};

struct Comparison {
  int sessions = 0;
  ModeMedians grpc, inprocess;
  double overhead = 0.0;  // 1 - median grpc tok/s / median in-process tok/s
  std::vector<double> round_overheads;  // the same per round (paired runs)
  bool outputs_match = false;           // session 0's tokens equal in round 0
};

std::vector<Comparison> Compare(const ServiceReport& report);
void PrintReport(const ServiceReport& report, std::FILE* out);
nlohmann::ordered_json ReportJson(const ServiceReport& report);

}  // namespace ckv::bench
