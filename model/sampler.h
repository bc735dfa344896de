// Token sampling, seeded and reproducible. The chain, in llama.cpp's default
// order (its common sampler with the unused stages left out):
//   1. penalties over the last penalty_last_n context tokens
//      (repetition, then frequency and presence, as llama.cpp defines them)
//   2. logit_bias (added to the logit of each listed id)
//   3. top_k, 4. top_p (on the softmax of the kept logits, untempered),
//   5. min_p (keeps p >= min_p * p_max of the same softmax),
//   6. temperature, then an inverse-CDF draw.
// Greedy (temperature <= 0) takes the argmax after steps 1-2.
//
// With a constraint (docs/structured-outputs.md), step 2b sets the logit of
// every token the grammar does not allow next to -inf (greedy and every
// sampling mode), and Sample advances the grammar by the chosen token. The
// end-of-generation tokens are allowed only when the text is complete, and
// are the only ones once no byte can follow, so generation ends there.
//
// Log-probabilities (logprobs >= 0) are the log-softmax over the whole
// vocabulary of the logits after steps 1-2: after penalties and logit_bias,
// before truncation (top_k/top_p/min_p) and temperature. They do not depend
// on temperature or truncation, and the greedy choice has the highest one.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/settings_schema.h"
#include "model/grammar/matcher.h"

namespace ckv {

// Limits of the sampling fields (ValidateSamplingParams), from the settings
// schema (common/settings_schema.h: CKV_SAMPLING_NUMBERS has every range).
using settings::kMaxFrequencyPenalty;
using settings::kMaxLogitBias;
using settings::kMaxLogitBiasEntries;
using settings::kMaxLogprobs;
using settings::kMaxPenaltyLastN;
using settings::kMaxPresencePenalty;
using settings::kMaxRepetitionPenalty;

// Defaults of the sampling settings; each scalar field's name, range and
// help are in common/settings_schema.h (CKV_SAMPLING_NUMBERS).
struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 40;            // 0: all tokens
  float top_p = 0.95f;       // 1: off
  uint64_t seed = 0;
  int max_tokens = 128;
  std::vector<std::string> stop;        // stop strings (not emitted)
  bool ignore_eos = false;              // end-of-generation tokens do not stop
  float min_p = 0.0f;                   // [0, 1]; 0: off
  float repetition_penalty = 1.0f;      // (0, 10]; 1: off
  float frequency_penalty = 0.0f;       // [-2, 2]; 0: off
  float presence_penalty = 0.0f;        // [-2, 2]; 0: off
  int penalty_last_n = 64;              // [0, 4096] context tokens; 0: off
  std::map<int32_t, float> logit_bias;  // id -> bias in [-100, 100]
  int logprobs = -1;  // -1: off; 0: the chosen token's; n <= 20: + top n
  // Grammar the output must follow, bound to the model's vocabulary; null:
  // none. Per request (never a session default); not with ignore_eos.
  std::shared_ptr<const grammar::TokenConstraint> constraint;
};

// INVALID_ARGUMENT on out-of-range values, in the schema's wording
// ("sampling.top_p must be in (0, 1], got 2"). With
// vocab_size > 0, logit_bias ids must be in [0, vocab_size) and a
// constraint's vocabulary no larger than vocab_size.
absl::Status ValidateSamplingParams(const SamplingParams& p,
                                    int vocab_size = 0);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  float logprob = 0.0f;           // of the chosen token
  std::vector<TokenLogprob> top;  // the `logprobs` most likely, descending
                                  // (ties: lower id first)
};

class Sampler {
 public:
  // `params` must be valid (ValidateSamplingParams).
  explicit Sampler(const SamplingParams& params);

  // Appends a token of the context (prompt, input, generated) to the
  // penalty window, which keeps the last penalty_last_n of them.
  void Accept(int32_t token);

  // Picks a token from one row of logits (the chosen one is not accepted
  // into the penalty window; a constraint is advanced by it). Greedy ties
  // take the lowest id. Fills `logprobs` when params.logprobs >= 0 and it
  // is non-null (with a constraint: of the masked logits).
  int32_t Sample(absl::Span<const float> logits,
                 TokenLogprobs* logprobs = nullptr);

  // The distribution Sample draws from when temperature > 0: (id,
  // probability) in draw order (descending logit, ascending id on ties).
  std::vector<std::pair<int32_t, double>> Distribution(
      absl::Span<const float> logits);

 private:
  // work_ = logits after penalties, logit_bias and the constraint's mask
  // (steps 1-2b).
  void Process(absl::Span<const float> logits);
  void ApplyConstraint();
  // Steps 3-6 over work_: candidates_ and weights_ (unnormalised).
  void Truncate();
  void FillLogprobs(int32_t chosen, TokenLogprobs* out);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::deque<int32_t> window_;  // last penalty_last_n context tokens
  std::vector<float> work_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> weights_;
  std::vector<int32_t> counted_;               // scratch: sorted window
  std::unique_ptr<grammar::Matcher> matcher_;  // with params.constraint
};

int32_t ArgMax(absl::Span<const float> logits);

}  // namespace ckv
