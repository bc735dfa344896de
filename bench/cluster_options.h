// Typed options of cluster_bench (the ClusterKV benchmark). The defaults
// live here only: the command-line flags (cluster_options.cc) take their
// defaults from these structs; --quick replaces the lists it names unless
// the corresponding flag is given.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/kv/kv_config.h"
#include "model/make_random.h"

namespace ckv::bench {

// The synthetic keys of the `keys` workload (see cluster_keygen.h).
struct KeyGenSpec {
  int directions = 48;       // mixture components per KV head
  double zipf = 1.0;         // component weights ~ 1 / (j + 1)^zipf
  double stay = 0.7;         // P(next token keeps the previous component)
  double noise = 0.5;        // relative Gaussian noise around a direction
  double norm_sigma = 0.3;   // log-normal spread of key magnitudes
  double scale = 4.0;        // typical key magnitude (pre-outliers)
  int outlier_channels = 4;  // large channels, in low-frequency RoPE pairs
  double outlier_magnitude = 10.0;
  float rope_base = 500000.0f;  // Llama 3.1
  int query_regions = 3;        // earlier regions each query head attends
  int region_tokens = 16;
  double query_noise = 0.3;  // relative noise added to a query
  double logit_std = 2.5;    // std of q.k/sqrt(d) over the context
};

struct ClusterBenchOptions {
  std::string out_json = "bench/results/cluster.json";
  std::string work_dir = "bench/results";  // the cached random model
  bool quick = false;
  int threads = 0;  // 0: every hardware thread
  // Compute backend of the engine and text workloads
  // (auto|cpu|cuda|fake).
  BackendKind backend = BackendKind::kAuto;
  uint64_t seed = 1;
  bool run_keys = true;
  bool run_engine = true;
  std::vector<int> budgets = {256, 512, 1024, 2048};

  // keys: attention-only stores built from synthetic keys.
  KeyGenSpec keygen;
  int kv_heads = 8, heads = 32, head_dim = 128;  // Llama-3.1-8B attention
  std::vector<int64_t> key_contexts = {4096, 8192, 16384, 32768};
  std::vector<int> tokens_per_cluster = {40, 80, 160};  // ratio ablation
  int key_queries = 8;    // decode steps measured per configuration
  int timing_steps = 24;  // timed steps of one attention layer
  int timing_hold = 4;    // consecutive timed steps sharing a query focus

  // engine: the transformer end to end.
  RandomModelSpec model = [] {
    RandomModelSpec s;
    s.layers = 2;
    s.dim = 4096;
    s.heads = 32;
    s.kv_heads = 8;
    s.ffn = 1024;
    s.vocab = "byte";
    s.dtype = kernels::DType::kF16;
    return s;
  }();
  // A GGUF model for the engine workload instead of the random one (e.g.
  // models/kjv-llama.gguf: decode-time flatness on a model with real
  // attention); --layers and --ffn then do not apply.
  std::string engine_model;
  // Sparse policies the engine workload decodes (registered names; empty:
  // every selecting policy). `full`, the baseline, always runs.
  std::vector<std::string> engine_policies;
  int dense_layers = 0;  // the product default is 2 of 32 layers
  std::vector<int64_t> engine_contexts = {4096, 8192, 16384, 32768};
  std::vector<int> batches = {1, 4, 16};
  int decode_steps = 8;  // timed, after one untimed step
  int prefill_chunk = 256;
  bool engine_quality = true;  // measure recall on session 0 (first batch)
  // engine on a device backend (bench/gpu_engine_bench.sh): sessions built
  // from synthetic clustered keys (cluster_keygen) appended to every layer
  // instead of a prefill; the backend's KV residency; the GQA selection
  // mode of every sparse policy.
  bool engine_synthetic = false;
  KvResidency kv_residency = KvResidency::kAuto;
  GqaSelection gqa_selection = GqaSelection::kPerQueryHead;
  std::string engine_prefill_cache;  // folder of saved prefills; empty: none

  // text: a real model on real text (bench/cluster_text.h); off unless
  // --workloads names it.
  bool run_text = false;
  std::string text_model = "models/kjv-llama.gguf";
  std::string text_file = "models/kjv-llama.heldout.txt";
  int64_t text_prompt_tokens = 4096;  // prefilled per window
  int64_t text_decode_tokens = 2048;  // scored per window, one step each
  int text_windows = 8;
  int text_recall_every = 8;
  int text_dense_layers = 0;  // the trained model has only 4 layers
  std::vector<int> text_budgets = {64, 128, 256, 512, 1024, 2048};
  std::vector<int> text_metric_budgets = {256, 1024};
};

// Reads the flags (after absl::ParseCommandLine). INVALID_ARGUMENT for
// values out of range.
absl::StatusOr<ClusterBenchOptions> ClusterBenchOptionsFromFlags();

}  // namespace ckv::bench
