#include "bench/mem_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace ckv::bench {
namespace {

// Eight independent accumulators so that the loop is bound by loads, not by
// one long dependency chain; integer adds vectorise without reassociation
// concerns.
uint64_t SumWords(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  }
  for (; i < n; ++i) acc[0] += p[i];
  uint64_t s = 0;
  for (uint64_t a : acc) s += a;
  return s;
}

}  // namespace

BandwidthResult MeasureReadBandwidth(int64_t bytes, int repeats) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(uint64_t));
  // Every word written (no page may stay a shared zero page).
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<uint64_t>(i) * 7 + 1;
  BandwidthResult r;
  r.bytes = n * static_cast<int64_t>(sizeof(uint64_t));
  r.repeats = std::max(1, repeats);
  volatile uint64_t sink = 0;
  for (int k = 0; k < r.repeats; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + SumWords(buf.get(), n);
    const std::chrono::duration<double> dt =
        std::chrono::steady_clock::now() - t0;
    if (k == 0 || dt.count() < r.best_seconds) r.best_seconds = dt.count();
  }
  r.bytes_per_second = r.bytes / std::max(r.best_seconds, 1e-12);
  return r;
}

}  // namespace ckv::bench
