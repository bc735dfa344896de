// Derived metrics (decode floor and efficiency, thread speedups), the
// stdout table and the JSON of engine_bench.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/engine_options.h"
#include "bench/engine_runner.h"
#include "bench/mem_bandwidth.h"
#include "model/model.h"
#include "nlohmann/json.hpp"

namespace ckv::bench {

struct BenchReport {
  const EngineBenchOptions* options = nullptr;
  const Model* model = nullptr;
  std::string model_path;
  bool random_model = false;
  BandwidthResult bandwidth;
  std::vector<ThreadRun> runs;
  // CPU share of one core the --background-load process actually used
  // over the runs (0: no load).
  double background_cpu_share = 0;

  // Bytes decode must read per token at `depth`: every weight matrix once
  // plus the K and V rows of `depth` cached tokens in every layer.
  int64_t DecodeBytes(int64_t depth) const;
  // DecodeBytes / the single-thread read bandwidth probed just before d.
  double DecodeFloorSeconds(const DecodeResult& d) const;
  // The run speedups are relative to: 1 thread, else the fewest threads.
  const ThreadRun& BaseRun() const;
};

void PrintReport(const BenchReport& report, std::FILE* out);
nlohmann::ordered_json ReportJson(const BenchReport& report);

}  // namespace ckv::bench
