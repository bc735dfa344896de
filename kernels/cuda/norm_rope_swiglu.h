// Element-wise CUDA ops of the transformer block: RMSNorm, RoPE, SwiGLU and
// GELU-tanh gates. Contracts mirror kernels/ref/ops.h (the oracles),
// the oracles. Framework-free: device pointers, sizes and a stream; every
// launcher returns the launch's cudaError_t (work runs asynchronously).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ckv::kernels::cuda {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, n_rows rows of n floats.
// y may equal x (in place).
cudaError_t RmsNorm(const float* x, const float* weight, int64_t n_rows,
                    int64_t n, float eps, float* y, cudaStream_t stream);

// y[j] = x[picked[j]] / sqrt(mean(x[picked[j]]^2) + eps) * weight for
// j < n_picked (rows of n floats; y dense, not aliasing x).
cudaError_t RmsNormPicked(const float* x, const int64_t* picked,
                          const float* weight, int64_t n_picked, int64_t n,
                          float eps, float* y, cudaStream_t stream);

// Rotary embedding; same fields and meaning as cpu::RopeParams.
struct RopeConfig {
  bool neox = false;  // false: pairs (2i, 2i+1); true: (i, i + rot/2)
  int rot_dims = 0;   // even, <= head_dim; dims beyond are untouched
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // device [rot_dims/2] or null
  float attn_factor = 1.0f;             // scales cos and sin (YaRN / LongRoPE)
};

// In place on x: [n_tokens][n_heads][head_dim]; positions: device
// [n_tokens]. Angles are computed in double, as the reference does, so
// results agree to F32 rounding even at positions ~1e5.
cudaError_t Rope(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 const int64_t* positions, const RopeConfig& config,
                 cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i]; out may equal gate or up.
cudaError_t SwiGlu(const float* gate, const float* up, int64_t n, float* out,
                   cudaStream_t stream);

// out[i] = gelu_tanh(gate[i]) * up[i]; out may equal gate or up.
cudaError_t GeluTanhGate(const float* gate, const float* up, int64_t n,
                         float* out, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
