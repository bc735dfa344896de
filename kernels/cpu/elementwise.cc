// Fast elementwise ops: RmsNorm, Rope, SwiGlu, AddBias, Add, DequantizeRow.
// These are light next to MatMul/Attention; they rely on the compiler's
// auto-vectorisation except SwiGlu/DequantizeRow, which use the ISA table.
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace ckv::kernels::cpu {
namespace {

void Run(ThreadPool* pool, int64_t n, int64_t grain,
         const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

void RmsNormRow(const float* x, const float* weight, int64_t n, float eps,
                float* y) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * x[i + j];
  }
  double ss = 0.0;
  for (float v : acc) ss += v;
  for (; i < n; ++i) ss += double{x[i]} * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int64_t k = 0; k < n; ++k) y[k] = x[k] * inv * weight[k];
}

// Rotates the pairs of one head with precomputed cos/sin per pair.
void RotateHead(float* v, int half, RopeMode mode, const float* cs,
                const float* sn) {
  for (int i = 0; i < half; ++i) {
    const int i0 = mode == RopeMode::kNormal ? 2 * i : i;
    const int i1 = mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
    const float x0 = v[i0], x1 = v[i1];
    v[i0] = x0 * cs[i] - x1 * sn[i];
    v[i1] = x0 * sn[i] + x1 * cs[i];
  }
}

}  // namespace

void RmsNorm(ThreadPool* pool, const float* x, const float* weight,
             int64_t n_rows, int64_t n, float eps, float* y) {
  Run(pool, n_rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RmsNormRow(x + r * n, weight, n, eps, y + r * n);
    }
  });
}

// Angles are computed in double once per token (shared by all heads), so
// the result matches ref::Rope to float rounding even at large positions.
void Rope(ThreadPool* pool, float* x, int64_t n_tokens, int n_heads,
          int head_dim, const int64_t* positions, const RopeParams& p) {
  const int half = p.rot_dims / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] =
        p.freq_scale * std::pow(double{p.freq_base}, -2.0 * i / p.rot_dims);
    if (p.freq_factors != nullptr) inv_freq[i] /= p.freq_factors[i];
  }
  Run(pool, n_tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = t0; t < t1; ++t) {
      for (int i = 0; i < half; ++i) {
        const double theta = static_cast<double>(positions[t]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(theta) * p.attn_factor);
        sn[i] = static_cast<float>(std::sin(theta) * p.attn_factor);
      }
      for (int h = 0; h < n_heads; ++h) {
        RotateHead(x + (t * n_heads + h) * head_dim, half, p.mode, cs.data(),
                   sn.data());
      }
    }
  });
}

void SwiGlu(ThreadPool* pool, const float* gate, const float* up, int64_t n,
            float* out) {
  const KernelSet& ks = ActiveKernels();
  Run(pool, n, 4096, [&](int64_t i0, int64_t i1) {
    ks.swiglu(gate + i0, up + i0, i1 - i0, out + i0);
  });
}

void AddBias(float* x, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] += bias[i];
  }
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  ActiveKernels().to_f32(t, src, n, dst);
}

}  // namespace ckv::kernels::cpu
