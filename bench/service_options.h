// Typed options of service_bench. The defaults live here only: the
// command-line flags (service_options.cc) take their defaults from this
// struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_common.h"
#include "model/kv/kv_config.h"
#include "model/make_random.h"

namespace ckv::bench {

struct ServiceBenchOptions {
  std::string model;  // GGUF path; empty: a random model cached in work_dir
  std::string work_dir = "bench/results";
  RandomModelSpec random = DefaultModelSpec();  // used when `model` is empty
  std::vector<int> sessions = {1, 4, 16};       // concurrent sessions per run
  int prompt_tokens = 512;   // Prefill of every session (random ids)
  int question_tokens = 16;  // Decode input appended before generating
  int decode_tokens = 64;    // max_tokens of every Decode (greedy)
  int rounds = 5;            // each round runs both modes, order alternating
  bool warmup = true;        // one untimed short run of each mode first
  int threads = 0;           // engine threads; 0: all cores
  int prefill_chunk = 256;
  // Engine time input gets while sessions decode (--prefill-share of the
  // server: 0 fair, 1 whole chunks), in both modes.
  double prefill_share = 0.0;
  KvPolicy policy = KvPolicy::kClusterKv;
  int budget = 1024;
  bool metrics = true;   // the server keeps a metrics registry, as main() does
  uint64_t seed = 1;     // random token ids and the sampler
  std::string out_json;  // empty: no JSON
  bool quick = false;

  int max_sessions() const;
};

// Reads the flags (after absl::ParseCommandLine) into options, applying the
// --quick preset where the corresponding flags were not given. Invalid values
// are INVALID_ARGUMENT.
absl::StatusOr<ServiceBenchOptions> ServiceBenchOptionsFromFlags();

}  // namespace ckv::bench
