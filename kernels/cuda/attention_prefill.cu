#include "kernels/cuda/attention_prefill.h"

#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

using detail::WarpMax;
using detail::WarpSum;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kQPerWarp = 4;
constexpr int kBq = kWarps * kQPerWarp;  // queries per block
constexpr int kBk = 32;                  // KV rows per tile (one per lane)

// Shared layout (floats): Q [kBq][hd_p], K [kBk][hd_p + 1] (odd stride:
// lane r reading row r, column d is conflict-free), V [kBk][hd_p].
template <int kPer>
struct Smem {
  static constexpr int kHd = kPer * 32;
  static constexpr int kKStride = kHd + 1;
  static constexpr size_t kFloats =
      size_t{kBq} * kHd + size_t{kBk} * kKStride + size_t{kBk} * kHd;
};

// Stages rows [t0, t0 + kBk) of K and V (zeros past n_rows) as F32.
template <typename T, int kPer>
__device__ void LoadTile(const T* k, const T* v, int64_t row_stride,
                         int64_t t0, int64_t n_rows, int head_dim, float* ks,
                         float* vs) {
  using S = Smem<kPer>;
  for (int e = threadIdx.x; e < kBk * head_dim; e += blockDim.x) {
    const int r = e / head_dim, d = e % head_dim;
    const int64_t row = t0 + r;
    const bool in = row < n_rows;
    ks[r * S::kKStride + d] = in ? detail::ToF32(k[row * row_stride + d]) : 0;
    vs[r * S::kHd + d] = in ? detail::ToF32(v[row * row_stride + d]) : 0;
  }
}

// Per-query online-softmax state of one warp (lane owns dims lane + 32j).
template <int kPer>
struct QState {
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPer];
};

// Folds the staged tile into one query's state. `visible` is this lane's
// row (t0 + lane) being attendable by the query.
template <int kPer>
__device__ void FoldTile(const float* qs, const float* ks, const float* vs,
                         int head_dim, float scale, bool visible,
                         QState<kPer>& st) {
  using S = Smem<kPer>;
  const int lane = threadIdx.x & 31;
  float s = -INFINITY;
  if (visible) {
    const float* kr = ks + lane * S::kKStride;
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot += qs[d] * kr[d];
    s = dot * scale;
  }
  const float m_new = fmaxf(st.m, WarpMax(s));
  if (m_new == -INFINITY) return;  // nothing visible yet
  const float alpha = expf(st.m - m_new);
  const float p = visible ? expf(s - m_new) : 0.0f;
  st.l = st.l * alpha + WarpSum(p);
#pragma unroll
  for (int j = 0; j < kPer; ++j) st.acc[j] *= alpha;
  for (int r = 0; r < kBk; ++r) {
    const float pr = __shfl_sync(detail::kFullMask, p, r);
    if (pr == 0.0f) continue;  // warp-uniform
#pragma unroll
    for (int j = 0; j < kPer; ++j) st.acc[j] += pr * vs[r * S::kHd + lane + 32 * j];
  }
  st.m = m_new;
}

// Largest position among the block's queries (into *out, shared).
__device__ void BlockMaxPos(const int64_t* q_pos, int q0, int n_q,
                            int64_t* out) {
  if (threadIdx.x == 0) {
    int64_t m = INT64_MIN;
    for (int i = q0; i < min(n_q, q0 + kBq); ++i) m = max(m, q_pos[i]);
    *out = m;
  }
  __syncthreads();
}

// grid (ceil(n_q / kBq), n_heads); dynamic shared Smem<kPer>::kFloats.
template <typename T, int kPer>
__global__ void __launch_bounds__(kThreads)
    PrefillKernel(PrefillAttentionParams p) {
  using S = Smem<kPer>;
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kBq * S::kHd;
  float* vs = ks + kBk * S::kKStride;
  __shared__ int64_t max_pos;
  const int h = blockIdx.y, q0 = blockIdx.x * kBq;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t q_stride = int64_t{p.n_heads} * p.head_dim;
  for (int e = threadIdx.x; e < kBq * p.head_dim; e += blockDim.x) {
    const int i = e / p.head_dim, d = e % p.head_dim;
    qs[i * S::kHd + d] =
        q0 + i < p.n_q ? p.q[(q0 + i) * q_stride + h * p.head_dim + d] : 0;
  }
  BlockMaxPos(p.q_pos, q0, p.n_q, &max_pos);
  const int64_t g = h / (p.n_heads / p.n_kv_heads);
  const T* k = static_cast<const T*>(p.k) + g * p.head_stride;
  const T* v = static_cast<const T*>(p.v) + g * p.head_stride;
  const int64_t last = max_pos - p.first_pos + 1;  // rows any query sees
  const int64_t n_rows = last < p.n_rows ? (last > 0 ? last : 0) : p.n_rows;
  QState<kPer> st[kQPerWarp];
  int64_t my_pos[kQPerWarp];
#pragma unroll
  for (int u = 0; u < kQPerWarp; ++u) {
    const int qi = q0 + warp * kQPerWarp + u;
    my_pos[u] = qi < p.n_q ? p.q_pos[qi] : INT64_MIN;
#pragma unroll
    for (int j = 0; j < kPer; ++j) st[u].acc[j] = 0.0f;
  }
  for (int64_t t0 = 0; t0 < n_rows; t0 += kBk) {
    __syncthreads();  // previous tile fully consumed (and qs written)
    LoadTile<T, kPer>(k, v, p.row_stride, t0, n_rows, p.head_dim, ks, vs);
    __syncthreads();
    const int64_t row = t0 + lane;
#pragma unroll
    for (int u = 0; u < kQPerWarp; ++u) {
      const bool visible = row < n_rows && p.first_pos + row <= my_pos[u];
      FoldTile<kPer>(qs + (warp * kQPerWarp + u) * S::kHd, ks, vs, p.head_dim,
                     p.scale, visible, st[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < kQPerWarp; ++u) {
    const int qi = q0 + warp * kQPerWarp + u;
    if (qi >= p.n_q) continue;
    float* o = p.out + qi * q_stride + h * p.head_dim;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int d = lane + 32 * j;
      if (d < p.head_dim) o[d] = st[u].l > 0.0f ? st[u].acc[j] / st[u].l : 0;
    }
  }
}

}  // namespace

cudaError_t PrefillAttention(const PrefillAttentionParams& p,
                             cudaStream_t stream) {
  if (p.n_q < 0 || p.n_heads <= 0 || p.n_kv_heads <= 0 ||
      p.n_heads % p.n_kv_heads != 0 || p.n_heads > 65535 || p.n_rows < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.n_q == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(detail::DivUp(p.n_q, kBq)), p.n_heads);
  return detail::DispatchKvType(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    return detail::DispatchPerLane(p.head_dim, [&](auto per) {
      constexpr int kPer = decltype(per)::kValue;
      const size_t bytes = Smem<kPer>::kFloats * sizeof(float);
      auto kernel = PrefillKernel<T, kPer>;
      CKV_CUDA_RETURN_IF_ERROR(detail::AllowSharedBytes(kernel, bytes));
      kernel<<<grid, kThreads, bytes, stream>>>(p);
      return cudaGetLastError();
    });
  });
}

}  // namespace ckv::kernels::cuda
