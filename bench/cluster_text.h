// The `text` workload of cluster_bench: selection quality on a real model
// and real text (model/text_eval.h), e.g. the project's trained demo model
// (models/) on its held-out text. Per budget and policy — clusterkv, quest,
// streaming, hybrid (clusterkv with recent_tokens = budget / 4), oracle —
// and once for full: top-k and attention-mass recall, KL(dense ‖ sparse),
// top-1 agreement and the perplexity delta against dense attention over
// windows x decode_tokens scored tokens. Then the clustering-metric ablation:
// clusterkv with cosine, l2 and inner-product k-means on the same keys.
#pragma once

#include "absl/status/status.h"
#include "bench/cluster_options.h"
#include "bench/cluster_report.h"

namespace ckv::bench {

// Appends one record per (experiment, policy, budget) with workload "text":
// experiment "quality" (every policy, metric cosine) and "metric" (clusterkv
// per metric). Sets report->text_model.
absl::Status RunTextWorkload(const ClusterBenchOptions& options, int threads,
                             ClusterReport* report);

}  // namespace ckv::bench
