// How many input tokens (prefill chunks, appended questions) the next engine
// step takes: the scheduler's time-share policy (EngineLoop::AddInputChunks).
//
// A step batches one token of every generating session with input chunks,
// so a decoding session waits for the whole step. With a fixed chunk a
// 256-token chunk costs milliseconds on a GPU but 2-4 s on a CPU, and a
// session decoding beside a long prefill got a token per chunk. Instead,
// while sessions decode, the input part of a step is sized from measured
// step times so that input gets `share` of the engine's time:
//   input tokens = decode-only step time * share / (1 - share)
//                  / seconds per input token,
// clamped to [min_tokens, max_tokens]; a decoding session's token then
// waits at most ~1 / (1 - share) times its decode-only step. The fair
// share (the default) gives each active job an equal part: input jobs /
// (input jobs + decoding rows). With no session decoding, input takes
// max_tokens (the step cost is nobody's wait).
//
// Measurements: the decode-only step time is an average of steps without
// input (the scheduler runs one when it has none yet and then every
// kRefreshSteps steps in which input and decoding meet, since it grows with
// context and decode rows); the per-token input cost is an average of
// (step time - decode-only time) / input tokens over steps with input.
// Until the per-token cost is known the budget is min_tokens (then learnt
// at the chunk sizes it picks). Pure logic over the times it is given: no
// clock.
#pragma once

#include <cstdint>

namespace ckv::server {

struct InputShareOptions {
  // Engine time that input gets while sessions decode: 0 = fair (the
  // input jobs' share of the active jobs), (0, 1) = that fraction, 1 = no
  // cap (every step takes max_tokens, the fixed chunk).
  double share = 0.0;
  int max_tokens = 256;  // --prefill-chunk
  // Smallest input part while decoding: progress every step, whatever the
  // measurements say. 1: on a 2-core CPU one token of a prefill at 8k
  // context costs ~15 ms beside a ~28 ms decode step, so a 4-token floor
  // made the decoding session's mean gap 3.2x its gap alone
  // (bench/stall_bench, docs/design.md) where its fair share is 2x.
  int min_tokens = 1;
};

// Whether `share` is one InputShareOptions::share accepts from a user: in
// [0, 1], not NaN (the flags check it; InputBudget clamps what it is given).
inline bool IsPrefillShare(double share) {
  return share >= 0.0 && share <= 1.0;
}

class InputBudget {
 public:
  // Steps in which input and decoding meet between two decode-only steps.
  static constexpr int kRefreshSteps = 32;

  explicit InputBudget(InputShareOptions options);

  // Input tokens the next step may take: `decode_rows` decoding sessions
  // and `input_jobs` jobs with input left. 0 means a decode-only step (to
  // measure it).
  int64_t Next(int decode_rows, int input_jobs) const;
  // The step just run: its rows and its wall time.
  void Record(int decode_rows, int64_t input_tokens, double seconds);

  // The estimates, for tests: the decode-only step (negative: not
  // measured yet) and one input token (0 until measured; an average <= 0
  // means input costs nothing measurable).
  double decode_step_seconds() const { return decode_seconds_; }
  double input_token_seconds() const { return token_seconds_; }

 private:
  double ShareOf(int decode_rows, int input_jobs) const;

  InputShareOptions options_;
  double decode_seconds_ = -1.0;  // decode-only step
  double token_seconds_ = 0.0;    // one input token on top of it
  bool token_known_ = false;
  int mixed_steps_ = 0;  // since the last decode-only step
};

}  // namespace ckv::server
