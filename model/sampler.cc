#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace ckv {
namespace {

// True when x is finite and in [lo, hi].
bool InRange(float x, float lo, float hi) {
  return std::isfinite(x) && x >= lo && x <= hi;
}

// The engine's range of a setting: requests and the server's flags may set
// token counts up to settings::kMaxTokenSetting (server/service_convert.cc
// checks the whole range), the engine takes larger ones too (clusterkv-model,
// forks, snapshots, benchmarks: budget = INT32_MAX selects everything).
settings::Range EngineRange(settings::Range r) {
  if (r.hi == static_cast<double>(settings::kMaxTokenSetting)) {
    r.hi = std::numeric_limits<double>::infinity();
  }
  return r;
}

// The schema's range check of every scalar setting; logprobs -1 is "off".
absl::Status CheckRanges(const SamplingParams& p) {
#define CKV_CHECK(name, type, range, help)                                  \
  if (!(std::string_view(#name) == "logprobs" && p.logprobs == -1)) {       \
    const std::string error = settings::OutOfRange(                         \
        "sampling." #name, static_cast<double>(p.name), EngineRange(range), \
        !std::is_floating_point_v<type>);                                   \
    if (!error.empty()) return absl::InvalidArgumentError(error);           \
  }
  CKV_SAMPLING_NUMBERS(CKV_CHECK)
#undef CKV_CHECK
  return absl::OkStatus();
}

absl::Status ValidateLogitBias(const SamplingParams& p, int vocab_size) {
  if (p.logit_bias.size() > static_cast<size_t>(kMaxLogitBiasEntries)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logit_bias has more than ", kMaxLogitBiasEntries, " entries"));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias id ", id, " is outside the vocabulary [0, ",
          vocab_size > 0 ? absl::StrCat(vocab_size) : "vocab", ")"));
    }
    if (!InRange(bias, -kMaxLogitBias, kMaxLogitBias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias values must be in [-", kMaxLogitBias, ", ",
                       kMaxLogitBias, "]"));
    }
  }
  return absl::OkStatus();
}

// Descending logit, ascending id on ties: the deterministic draw order.
bool Before(const std::pair<float, int32_t>& a,
            const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p, int vocab_size) {
  if (auto s = CheckRanges(p); !s.ok()) return s;
  if (p.constraint != nullptr) {
    if (p.ignore_eos) {
      return absl::InvalidArgumentError(
          "sampling.constraint cannot be combined with ignore_eos (a "
          "constrained output ends when its grammar is complete)");
    }
    if (vocab_size > 0 && p.constraint->vocab->vocab_size() > vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.constraint is bound to a vocabulary of ",
                       p.constraint->vocab->vocab_size(),
                       " tokens, the model has ", vocab_size));
    }
  }
  for (const auto& s : p.stop) {
    if (s.empty()) return absl::InvalidArgumentError("empty stop string");
  }
  return ValidateLogitBias(p, vocab_size);
}

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed) {
  if (params_.constraint != nullptr) {
    matcher_ = std::make_unique<grammar::Matcher>(params_.constraint);
  }
}

// Step 2b: -inf for every token the grammar does not allow next (ids past
// the constraint's vocabulary included).
void Sampler::ApplyConstraint() {
  const std::vector<uint64_t>& mask = matcher_->Mask();
  const size_t n = std::min(work_.size(), mask.size() * 64);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < n; ++i) {
    if (!((mask[i >> 6] >> (i & 63)) & 1)) work_[i] = kMasked;
  }
  for (size_t i = n; i < work_.size(); ++i) work_[i] = kMasked;
}

void Sampler::Accept(int32_t token) {
  if (params_.penalty_last_n <= 0) return;
  window_.push_back(token);
  while (window_.size() > static_cast<size_t>(params_.penalty_last_n)) {
    window_.pop_front();
  }
}

// llama.cpp's penalties: for each token seen c > 0 times in the window, a
// positive logit is divided by repetition_penalty and a negative one
// multiplied by it, then c * frequency_penalty + presence_penalty is
// subtracted. Then each logit_bias entry is added.
void Sampler::Process(absl::Span<const float> logits) {
  work_.assign(logits.begin(), logits.end());
  const bool penalize = params_.repetition_penalty != 1.0f ||
                        params_.frequency_penalty != 0.0f ||
                        params_.presence_penalty != 0.0f;
  if (penalize && !window_.empty()) {
    counted_.assign(window_.begin(), window_.end());
    std::sort(counted_.begin(), counted_.end());
    for (size_t i = 0; i < counted_.size();) {
      size_t j = i;
      while (j < counted_.size() && counted_[j] == counted_[i]) ++j;
      const int32_t id = counted_[i];
      const float count = static_cast<float>(j - i);
      i = j;
      if (id < 0 || static_cast<size_t>(id) >= work_.size()) continue;
      float& l = work_[id];
      l = l <= 0.0f ? l * params_.repetition_penalty
                    : l / params_.repetition_penalty;
      l -= count * params_.frequency_penalty + params_.presence_penalty;
    }
  }
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && static_cast<size_t>(id) < work_.size()) work_[id] += bias;
  }
  if (matcher_ != nullptr) ApplyConstraint();
}

void Sampler::Truncate() {
  auto& c = candidates_;
  c.resize(work_.size());
  for (size_t i = 0; i < work_.size(); ++i) {
    c[i] = {work_[i], static_cast<int32_t>(i)};
  }
  size_t keep = c.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
  }
  std::partial_sort(c.begin(), c.begin() + keep, c.end(), Before);
  c.resize(keep);
  // Masked tokens (-inf, from a constraint) are never candidates.
  while (c.size() > 1 && std::isinf(c.back().first) && c.back().first < 0) {
    c.pop_back();
  }
  // Top-p over the softmax of the kept (untempered) logits.
  const double max_logit = c[0].first;
  if (params_.top_p < 1.0f) {
    double total = 0.0;
    for (const auto& [l, id] : c) total += std::exp(double{l} - max_logit);
    double cum = 0.0;
    size_t n = 0;
    while (n < c.size()) {
      cum += std::exp(double{c[n].first} - max_logit) / total;
      ++n;
      if (cum >= params_.top_p) break;
    }
    c.resize(n);
  }
  // Min-p: p_i >= min_p * p_max, i.e. l_i >= l_max + log(min_p).
  if (params_.min_p > 0.0f) {
    const double threshold = max_logit + std::log(double{params_.min_p});
    size_t n = 1;
    while (n < c.size() && double{c[n].first} >= threshold) ++n;
    c.resize(n);
  }
  weights_.resize(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    weights_[i] =
        std::exp((double{c[i].first} - max_logit) / params_.temperature);
  }
}

std::vector<std::pair<int32_t, double>> Sampler::Distribution(
    absl::Span<const float> logits) {
  std::vector<std::pair<int32_t, double>> out;
  if (logits.empty() || params_.temperature <= 0.0f) return out;
  Process(logits);
  Truncate();
  double sum = 0.0;
  for (double w : weights_) sum += w;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    out.emplace_back(candidates_[i].second, weights_[i] / sum);
  }
  return out;
}

void Sampler::FillLogprobs(int32_t chosen, TokenLogprobs* out) {
  double max_logit = work_[0];
  for (float l : work_) max_logit = std::max(max_logit, double{l});
  double sum = 0.0;
  for (float l : work_) sum += std::exp(double{l} - max_logit);
  const double lse = max_logit + std::log(sum);
  out->logprob = static_cast<float>(double{work_[chosen]} - lse);
  out->top.clear();
  const size_t n =
      std::min(static_cast<size_t>(params_.logprobs), work_.size());
  if (n == 0) return;
  auto& c = candidates_;
  c.resize(work_.size());
  for (size_t i = 0; i < work_.size(); ++i) {
    c[i] = {work_[i], static_cast<int32_t>(i)};
  }
  std::partial_sort(c.begin(), c.begin() + n, c.end(), Before);
  for (size_t i = 0; i < n; ++i) {
    out->top.push_back(
        {c[i].second, static_cast<float>(double{c[i].first} - lse)});
  }
}

int32_t Sampler::Sample(absl::Span<const float> logits,
                        TokenLogprobs* logprobs) {
  if (logits.empty()) return 0;
  Process(logits);
  int32_t chosen;
  if (params_.temperature <= 0.0f || work_.size() <= 1) {
    chosen = ArgMax(work_);
  } else {
    Truncate();
    double sum = 0.0;
    for (double w : weights_) sum += w;
    // Inverse-CDF draw (portable, unlike <random> distributions whose
    // algorithms differ between standard libraries).
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
    chosen = candidates_.back().second;
    double cum = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += weights_[i];
      if (u < cum) {
        chosen = candidates_[i].second;
        break;
      }
    }
  }
  if (logprobs != nullptr && params_.logprobs >= 0) {
    FillLogprobs(chosen, logprobs);
  }
  // The chosen token is allowed (the mask is never empty); an
  // end-of-generation token leaves the grammar as it is.
  if (matcher_ != nullptr) matcher_->Accept(chosen).IgnoreError();
  return chosen;
}

}  // namespace ckv
