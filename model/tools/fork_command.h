// `clusterkv-model generate-forks`: one prompt prefilled once, then
// answered greedily by one fork per --forks entry (POLICY:BUDGET, e.g.
// clusterkv:256,quest:1024), each exactly as `generate --policy POLICY
// --budget BUDGET --temperature 0` with the same other flags answers it:
// multi-token appends attend densely under every policy, so the prefill
// (into a clustered store that builds every policy's index) and the first
// generated token are the same for all (a prompt whose last prefill chunk
// is one token is prefilled by each fork instead: generate attends that
// token before the chunks ahead of it become segments). A fork of policy
// full is a clustered store attending everything, where generate uses a
// dense cache: the same attention, summed in another row order. Benchmarks
// use it to ask many
// policies about one long prompt for the cost of one prefill
// (bench/needle_bench.py). Prints one JSON line per fork: {"fork",
// "text", "tokens", "finish" ("eos" or "length"), "shared_prefill"}.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "model/tools/cli_options.h"

namespace ckv {

// INVALID_ARGUMENT when --forks is empty or malformed, names an unknown
// policy, or the sampling is not greedy (--temperature 0).
absl::Status RunGenerateForks(const std::string& model_path,
                              const std::string& prompt,
                              const CliOptions& options);

}  // namespace ckv
