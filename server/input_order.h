// The order in which jobs with input left (prefill chunks, questions) share
// a step's prefill budget (EngineLoop::AddInputChunks): shortest remaining
// input first, so a question never waits behind a long document; with
// aging, so that a long input is not starved by a steady stream of shorter
// ones: a job left without a chunk for kMaxInputWaitSteps steps in a row
// goes first (the longest-waiting first). Every input then advances at least
// once every kMaxInputWaitSteps + 1 steps while the budget is at least its
// chunk.
#pragma once

#include <cstdint>

namespace ckv::server {

inline constexpr int kMaxInputWaitSteps = 32;

struct InputCandidate {
  int64_t remaining = 0;  // input tokens not yet fed
  int waits = 0;          // steps in a row with input left and no chunk
};

// Strict weak order for std::stable_sort (ties keep arrival order).
inline bool InputGoesFirst(const InputCandidate& a, const InputCandidate& b) {
  const bool a_aged = a.waits >= kMaxInputWaitSteps;
  const bool b_aged = b.waits >= kMaxInputWaitSteps;
  if (a_aged != b_aged) return a_aged;
  if (a_aged) return a.waits > b.waits;
  return a.remaining < b.remaining;
}

// After a step: a job that got a chunk starts counting again.
inline int NextWaits(int waits, int64_t chunk) {
  return chunk > 0 ? 0 : waits + 1;
}

}  // namespace ckv::server
