#include "kernels/cuda/norm_rope_swiglu.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

using detail::BlockSum;

constexpr int kNormThreads = 256;
constexpr int kEltThreads = 256;

// One block per row. Each thread reads and writes the same elements, so
// y == x is safe.
// picked: null, or the row of x each block reads (y is dense).
__global__ void RmsNormKernel(const float* __restrict__ x,
                              const float* __restrict__ w, int64_t n, float eps,
                              const int64_t* __restrict__ picked, float* y) {
  const int64_t row = picked != nullptr ? picked[blockIdx.x] : blockIdx.x;
  const float* xr = x + row * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = BlockSum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    yr[i] = xr[i] * inv * w[i];
  }
}

// One thread per (token, head, pair); grid-stride.
__global__ void RopeKernel(float* x, int64_t n_tokens, int n_heads,
                           int head_dim, const int64_t* __restrict__ positions,
                           RopeConfig c) {
  const int half = c.rot_dims / 2;
  const int64_t total = n_tokens * n_heads * half;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int i = static_cast<int>(e % half);
    const int64_t th = e / half;  // token * n_heads + head
    const int64_t t = th / n_heads;
    float* v = x + th * head_dim;
    // Same operation order as ref::Rope: (pos * scale) * base^(-2i/rot).
    double theta = static_cast<double>(positions[t]) * c.freq_scale *
                   pow(static_cast<double>(c.freq_base), -2.0 * i / c.rot_dims);
    if (c.freq_factors != nullptr) theta /= c.freq_factors[i];
    double sn, cs;
    sincos(theta, &sn, &cs);
    sn *= c.attn_factor;
    cs *= c.attn_factor;
    const int i0 = c.neox ? i : 2 * i;
    const int i1 = c.neox ? i + half : 2 * i + 1;
    const double x0 = v[i0], x1 = v[i1];
    v[i0] = static_cast<float>(x0 * cs - x1 * sn);
    v[i1] = static_cast<float>(x0 * sn + x1 * cs);
  }
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t n,
                             float* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// gelu_tanh(g) * up with the reference's constants, in F32.
__global__ void GeluTanhGateKernel(const float* gate, const float* up,
                                   int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    const float t = tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g));
    out[i] = 0.5f * g * (1.0f + t) * up[i];
  }
}

unsigned GridFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(detail::DivUp(n, kEltThreads), 1, 1 << 16));
}

}  // namespace

cudaError_t RmsNorm(const float* x, const float* weight, int64_t n_rows,
                    int64_t n, float eps, float* y, cudaStream_t stream) {
  if (n_rows < 0 || n <= 0 || n_rows > 0x7fffffff) return cudaErrorInvalidValue;
  if (n_rows == 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(n_rows), kNormThreads, 0, stream>>>(
      x, weight, n, eps, nullptr, y);
  return cudaGetLastError();
}

cudaError_t RmsNormPicked(const float* x, const int64_t* picked,
                          const float* weight, int64_t n_picked, int64_t n,
                          float eps, float* y, cudaStream_t stream) {
  if (n_picked < 0 || n <= 0 || n_picked > 0x7fffffff || picked == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (n_picked == 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(n_picked), kNormThreads, 0, stream>>>(
      x, weight, n, eps, picked, y);
  return cudaGetLastError();
}

cudaError_t Rope(float* x, int64_t n_tokens, int n_heads, int head_dim,
                 const int64_t* positions, const RopeConfig& config,
                 cudaStream_t stream) {
  if (n_tokens < 0 || n_heads <= 0 || config.rot_dims < 0 ||
      config.rot_dims % 2 != 0 || config.rot_dims > head_dim) {
    return cudaErrorInvalidValue;
  }
  const int64_t total = n_tokens * n_heads * (config.rot_dims / 2);
  if (total == 0) return cudaSuccess;
  RopeKernel<<<GridFor(total), kEltThreads, 0, stream>>>(
      x, n_tokens, n_heads, head_dim, positions, config);
  return cudaGetLastError();
}

cudaError_t SwiGlu(const float* gate, const float* up, int64_t n, float* out,
                   cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  SwiGluKernel<<<GridFor(n), kEltThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t GeluTanhGate(const float* gate, const float* up, int64_t n,
                         float* out, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  GeluTanhGateKernel<<<GridFor(n), kEltThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
