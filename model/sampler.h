// Token sampling: greedy, or temperature with top-k and top-p (nucleus),
// seeded and reproducible. Order as llama.cpp: top-k, then top-p on the
// softmax of the raw logits, then temperature, then a draw.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ckv {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 40;            // <= 0: all tokens
  float top_p = 0.95f;       // 1: off
  uint64_t seed = 0;
  int max_tokens = 128;
  std::vector<std::string> stop;  // stop strings (not emitted)
  bool ignore_eos = false;        // end-of-generation tokens do not stop
};

// INVALID_ARGUMENT on out-of-range values (naming the field).
absl::Status ValidateSamplingParams(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks a token from one row of logits. Greedy ties take the lowest id.
  int32_t Sample(absl::Span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> weights_;
};

int32_t ArgMax(absl::Span<const float> logits);

}  // namespace ckv
