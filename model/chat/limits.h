// Work bounds of one template render, so that a hostile template cannot
// hang or exhaust memory: every excess is a RESOURCE_EXHAUSTED error.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ckv::chat {

struct TemplateLimits {
  // Longest rendered text, and longest string any expression may build.
  int64_t max_output_bytes = int64_t{8} << 20;
  // Largest value (Value::weight(): about its bytes written out as a tree)
  // an expression may build. The messages count too.
  int64_t max_value_weight = int64_t{32} << 20;
  // Deepest list/dict nesting of a value.
  int max_value_depth = 128;
  // Loop iterations over the whole render.
  int64_t max_loop_iterations = 250'000;
  // Expression tree height and block nesting of the template source.
  int max_nesting = 64;
  // Macro calls active at once (recursion depth).
  int max_call_depth = 16;
  // Evaluation steps plus bytes copied, over the whole render.
  int64_t max_work = 100'000'000;
};

// Counts the work of one render against its limits.
class Budget {
 public:
  explicit Budget(const TemplateLimits& limits) : limits_(limits) {}
  const TemplateLimits& limits() const { return limits_; }

  absl::Status Charge(int64_t units) {
    work_ += units < 0 ? 0 : units;
    if (work_ > limits_.max_work) {
      return absl::ResourceExhaustedError(
          absl::StrCat("template render exceeded its work limit (",
                       limits_.max_work, " steps)"));
    }
    return absl::OkStatus();
  }
  // Error when a string of `bytes` would exceed max_output_bytes.
  absl::Status CheckStringSize(int64_t bytes) const {
    if (bytes > limits_.max_output_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("template built a string of ", bytes, " bytes (limit ",
                       limits_.max_output_bytes, ")"));
    }
    return absl::OkStatus();
  }
  absl::Status CountIteration() {
    if (++iterations_ > limits_.max_loop_iterations) {
      return absl::ResourceExhaustedError(
          absl::StrCat("template render exceeded ", limits_.max_loop_iterations,
                       " loop iterations"));
    }
    return Charge(1);
  }

 private:
  TemplateLimits limits_;
  int64_t work_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace ckv::chat
