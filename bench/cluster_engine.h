// The `engine` workload of cluster_bench: the transformer end to end on a
// random model with the attention geometry of Llama-3.1-8B (32 query / 8 KV
// heads, head dim 128, d_model 4096) and few layers, or on --engine_model
// (a GGUF file, e.g. the trained models/kjv-llama.gguf).
//
// Per context L: one session store (policy clusterkv, build_all_indexes) is
// prefilled with L random byte tokens in one prompt call (dense attention;
// k-means runs on the ClusterWorker, overlapping the following layers) and
// timed. Then, per policy (full; clusterkv, quest, streaming at each budget)
// and batch size N, N forks of it (sharing its segments) decode together:
// one Transformer::Forward per step with one token per session, greedy. One
// untimed step, then `decode_steps` timed steps. The transformer's and the
// stores' instrumentation split a step into attention (KV append, Select,
// attention) and the rest, and Select into planning and the block cache.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "bench/cluster_options.h"
#include "bench/cluster_report.h"
#include "model/kv/cluster_worker.h"

namespace ckv::bench {

// Appends one record per (context, policy, budget, batch); sets
// report->engine_model.
absl::Status RunEngineWorkload(const ClusterBenchOptions& options, int threads,
                               ClusterWorker* worker, ClusterReport* report);

}  // namespace ckv::bench
