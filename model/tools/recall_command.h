// `clusterkv-model recall`: replays a token file through a sparse session
// (the clustered store with the chosen policy) and a dense shadow session
// (an F16/BF16 DenseKvCache) in the same run, and reports the quality
// measures of model/kv/quality.h as one JSON line per policy
// (--recall-policies, e.g. clusterkv,quest,streaming,oracle; default the
// --policy alone).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/tools/cli_options.h"

namespace ckv {

// Prefills tokens[0, P) (P = --prompt-tokens) as one prompt call into both
// sessions, then feeds each remaining token as a decode step. Prints
// {"steps", "topk_recall", "mass_recall", "kl", "top1_agreement",
//  "output_rel_err", "layers": [{"layer", "topk_recall", "mass_recall",
//  "output_rel_err"}], "config": {...}}: means over steps and query heads
// of the layers >= dense_layers; kl (nats) and top1_agreement over steps.
// With --probe-span B:E also "span_probe": per decode step {"q_pos",
// "next_token", "dense_argmax", "sparse_argmax", "layers": [{"layer",
// "heads": [SpanHeadProbe as JSON]}]} (model/kv/span_probe.h).
// INVALID_ARGUMENT when P < 1, P >= tokens.size(), an id is outside the
// vocabulary, a policy name is unknown or --probe-span is not B:E with
// 0 <= B < E.
absl::Status RunRecall(const std::string& model_path,
                       const std::vector<int32_t>& tokens,
                       const CliOptions& options);

}  // namespace ckv
