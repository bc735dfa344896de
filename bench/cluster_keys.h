// The `keys` workload of cluster_bench: attention-only clustered stores
// (one layer of the engine's attention geometry, every layer sparse) filled
// with synthetic keys (cluster_keygen.h), to measure recall and the cost of
// one attention layer without the rest of a transformer.
//
// Per context L: one store is prefilled with L tokens (one segment) with
// policy clusterkv, cosine, and build_all_indexes, then forked per policy and
// budget; each fork decodes `key_queries` steps (one appended token and one
// query each; the same queries for every fork), measured with
// model/kv/quality.h. At the largest context, further parents give the
// metric (l2, ip) and tokens-per-cluster ablations, and every policy's
// decode step of the layer (Select + attention over the selection) is timed
// against dense attention over all tokens.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "bench/cluster_options.h"
#include "bench/cluster_report.h"
#include "model/kv/cluster_worker.h"

namespace ckv::kernels::cpu {
class ThreadPool;
}

namespace ckv::bench {

absl::Status RunKeysWorkload(const ClusterBenchOptions& options,
                             kernels::cpu::ThreadPool* pool,
                             ClusterWorker* worker,
                             std::vector<RunRecord>* runs);

}  // namespace ckv::bench
