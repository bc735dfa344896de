#include "server/input_budget.h"

#include <algorithm>
#include <cmath>

namespace ckv::server {
namespace {

// Weight of a new measurement in the running averages: follows a context
// that grows by a chunk per step within a few steps, smooths one noisy step.
constexpr double kNewWeight = 0.3;

double Blend(bool known, double average, double sample) {
  return known ? average + kNewWeight * (sample - average) : sample;
}

}  // namespace

InputBudget::InputBudget(InputShareOptions options) : options_(options) {
  // Out of [0, 1] (NaN included): the nearest meaningful share.
  if (!(options_.share >= 0.0)) options_.share = 0.0;
  options_.share = std::min(options_.share, 1.0);
  options_.max_tokens = std::max(1, options_.max_tokens);
  options_.min_tokens = std::clamp(options_.min_tokens, 1, options_.max_tokens);
}

double InputBudget::ShareOf(int decode_rows, int input_jobs) const {
  if (options_.share > 0) return options_.share;
  return static_cast<double>(input_jobs) / (input_jobs + decode_rows);
}

int64_t InputBudget::Next(int decode_rows, int input_jobs) const {
  const double share = ShareOf(decode_rows, input_jobs);
  if (decode_rows == 0 || input_jobs == 0 || share >= 1.0) {
    return options_.max_tokens;
  }
  if (decode_seconds_ < 0 || mixed_steps_ >= kRefreshSteps) return 0;
  if (!token_known_) return options_.min_tokens;
  const double input_seconds = decode_seconds_ * share / (1.0 - share);
  // In double: a zero per-token cost must not divide into inf; the
  // 1e-9 keeps an exact quotient from flooring one below.
  const double tokens =
      token_seconds_ > 0
          ? std::floor(input_seconds / token_seconds_ * (1.0 + 1e-9))
          : static_cast<double>(options_.max_tokens);
  return static_cast<int64_t>(
      std::clamp(tokens, static_cast<double>(options_.min_tokens),
                 static_cast<double>(options_.max_tokens)));
}

void InputBudget::Record(int decode_rows, int64_t input_tokens,
                         double seconds) {
  if (!(seconds >= 0)) return;  // NaN or a clock going backwards
  if (input_tokens == 0) {
    if (decode_rows > 0) {
      decode_seconds_ = Blend(decode_seconds_ >= 0, decode_seconds_, seconds);
      mixed_steps_ = 0;
    }
    return;
  }
  if (decode_rows > 0) {
    ++mixed_steps_;
    if (decode_seconds_ < 0) return;  // no base to subtract yet
  }
  // An input-only step also reads the weights once, as a decode step does.
  // Not clamped at 0 per step: noise larger than a few cheap tokens must
  // average out, not add up (Next reads an average <= 0 as "free").
  const double base = std::max(decode_seconds_, 0.0);
  token_seconds_ = Blend(token_known_, token_seconds_,
                         (seconds - base) / static_cast<double>(input_tokens));
  token_known_ = true;
}

}  // namespace ckv::server
