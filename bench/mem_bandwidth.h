// A single-thread memory read-bandwidth probe: the baseline decode speed is
// compared against (decode streams every weight matrix once per token).
#pragma once

#include <cstdint>

namespace ckv::bench {

struct BandwidthResult {
  int64_t bytes = 0;       // buffer size
  int repeats = 0;
  double best_seconds = 0;  // fastest full pass
  double bytes_per_second = 0;
};

// Sums a freshly allocated (and touched) buffer of `bytes` bytes `repeats`
// times on the calling thread; reports the fastest pass. `bytes` should be
// well beyond the last-level cache.
BandwidthResult MeasureReadBandwidth(int64_t bytes, int repeats);

}  // namespace ckv::bench
