// Fast GELU-tanh gating and soft-capping: float math split over the pool
// (the references in kernels/ref/ops.cc compute in double).
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace ckv::kernels::cpu {
namespace {

constexpr int64_t kGrain = 4096;

// tanh(y) = 1 - 2 / (exp(2y) + 1), clamped so exp cannot overflow.
inline float FastTanh(float y) {
  const float c = std::fmin(std::fmax(y, -15.0f), 15.0f);
  return 1.0f - 2.0f / (std::exp(2.0f * c) + 1.0f);
}

template <typename Fn>
void Run(ThreadPool* pool, int64_t n, const Fn& fn) {
  if (pool == nullptr || n <= kGrain) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, kGrain, fn);
  }
}

}  // namespace

void GeluTanhGate(ThreadPool* pool, const float* gate, const float* up,
                  int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  Run(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      const float t = FastTanh(kSqrt2OverPi * g * (1.0f + 0.044715f * g * g));
      out[i] = 0.5f * g * (1.0f + t) * up[i];
    }
  });
}

void SoftCap(ThreadPool* pool, float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  Run(pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] = cap * FastTanh(x[i] * inv);
  });
}

}  // namespace ckv::kernels::cpu
