// Prefill + decode loop for one sequence: sampling, EOS, stop strings and
// streaming-safe text output. Shared by the CLI (and the server's sessions).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/kv_cache.h"
#include "model/sampler.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"

namespace ckv {

enum class FinishReason { kLength, kEos, kStop, kCancelled };
const char* FinishReasonName(FinishReason r);

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (stop string tokens included)
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;  // after the first generated token
  double time_to_first_token_seconds = 0.0;
};

// Releases text that cannot be part of a stop string; finds stop strings
// spanning several tokens. Text after a stop string is dropped.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends text; returns what is safe to emit now. Sets *stopped when a
  // stop string completed (the returned text ends before it).
  std::string Push(absl::string_view text, bool* stopped);
  // Remaining held-back text (call at the end when no stop string matched).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

// Emits text pieces; returning false cancels generation.
using TextSink = std::function<bool(absl::string_view)>;

// Prefills `prompt` (non-empty; appended after what the cache holds) and
// generates up to params.max_tokens tokens. The penalty window of the
// sampler starts with `prompt` and takes every generated token. On return
// the cache holds the prompt and every generated token except an
// end-of-generation one (the last token included, so that a later call
// continues after it).
absl::StatusOr<GenerationResult> Generate(Transformer& model,
                                          const Tokenizer& tokenizer,
                                          KvCache& cache,
                                          absl::Span<const int32_t> prompt,
                                          const SamplingParams& params,
                                          const TextSink& sink);

}  // namespace ckv
