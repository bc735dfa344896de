#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace ckv {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return absl::InvalidArgumentError("temperature must be finite and >= 0");
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError("top_p must be in (0, 1]");
  }
  if (p.max_tokens < 0) {
    return absl::InvalidArgumentError("max_tokens must be >= 0");
  }
  for (const auto& s : p.stop) {
    if (s.empty()) return absl::InvalidArgumentError("empty stop string");
  }
  return absl::OkStatus();
}

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(absl::Span<const float> logits) {
  if (params_.temperature <= 0.0f || logits.size() <= 1) {
    return ArgMax(logits);
  }
  auto& c = candidates_;
  c.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    c[i] = {logits[i], static_cast<int32_t>(i)};
  }
  // Descending logit, ascending id on ties: deterministic order.
  auto before = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = c.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
  }
  std::partial_sort(c.begin(), c.begin() + keep, c.end(), before);
  c.resize(keep);
  // Top-p over the softmax of the raw logits.
  const float max_logit = c[0].first;
  double total = 0.0;
  for (const auto& [l, id] : c) total += std::exp(double{l} - max_logit);
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < c.size()) {
      cum += std::exp(double{c[n].first} - max_logit) / total;
      ++n;
      if (cum >= params_.top_p) break;
    }
    c.resize(n);
  }
  // Temperature, then an inverse-CDF draw (portable, unlike <random>
  // distributions whose algorithms differ between standard libraries).
  double sum = 0.0;
  weights_.resize(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    weights_[i] =
        std::exp((double{c[i].first} - max_logit) / params_.temperature);
    sum += weights_[i];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += weights_[i];
    if (u < cum) return c[i].second;
  }
  return c.back().second;
}

}  // namespace ckv
