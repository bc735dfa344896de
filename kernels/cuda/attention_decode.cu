#include "kernels/cuda/attention_decode.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

using detail::kFullMask;
using detail::WarpSum;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;           // rows in flight per warp
constexpr int kTargetBlocks = 1056;  // ~8 per SM on a 132-SM H200
constexpr int64_t kMinRowsPerSplit = 64;
constexpr int kMaxSplits = 256;

// Per-lane online-softmax state; lane owns dims lane + 32 * j.
template <int kPer>
struct State {
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPer];
};

// Stored row of list position r (dense: r itself).
__device__ __forceinline__ int64_t RowOf(const int32_t* list, int64_t r) {
  return list != nullptr ? list[r] : r;
}

// Folds rows [begin, end) of the head's list into st (one warp).
template <typename T, int kPer>
__device__ void AttendRange(const T* k, const T* v, int64_t row_stride,
                            const int32_t* list, int64_t begin, int64_t end,
                            int64_t step, int head_dim, float scale,
                            const float (&q)[kPer], State<kPer>& st) {
  const int lane = threadIdx.x & 31;
  for (int64_t base = begin; base < end; base += step) {
    float s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t r = base + u;
      float part = 0.0f;
      if (r < end) {
        const T* kr = k + RowOf(list, r) * row_stride;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int d = lane + 32 * j;
          if (d < head_dim) part += q[j] * detail::ToF32(kr[d]);
        }
      }
      s[u] = part;
    }
    float m_new = st.m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      s[u] = base + u < end ? WarpSum(s[u]) * scale : -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    const float alpha = expf(st.m - m_new);  // m = -inf -> 0
    st.l *= alpha;
#pragma unroll
    for (int j = 0; j < kPer; ++j) st.acc[j] *= alpha;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u >= end) continue;
      const float p = expf(s[u] - m_new);
      st.l += p;
      const T* vr = v + RowOf(list, base + u) * row_stride;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int d = lane + 32 * j;
        if (d < head_dim) st.acc[j] += p * detail::ToF32(vr[d]);
      }
    }
    st.m = m_new;
  }
}

// Merges the warps' states in shared memory; thread d < head_dim gets the
// block's (m, l, acc[d]) and writes it: normalised to out when unsplit,
// else raw to the workspace slot [head][split] = (m, l, acc[0..hd)).
template <int kPer>
__device__ void MergeAndStore(const State<kPer>& st, int head_dim,
                              float* out, float* slot) {
  __shared__ float sm[kWarps], sl[kWarps], sacc[kWarps][kPer * 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sm[warp] = st.m;
    sl[warp] = st.l;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) sacc[warp][lane + 32 * j] = st.acc[j];
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm[w]);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float l = 0.0f, a = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (sm[w] == -INFINITY) continue;
      const float f = expf(sm[w] - m);
      l += sl[w] * f;
      a += sacc[w][d] * f;
    }
    if (slot == nullptr) {
      out[d] = l > 0.0f ? a / l : 0.0f;
    } else {
      if (d == 0) {
        slot[0] = m;
        slot[1] = l;
      }
      slot[2 + d] = a;
    }
  }
}

// grid (splits, n_heads). Split s covers list positions
// [s * chunk, (s + 1) * chunk) of the head's rows.
template <typename T, int kPer>
__global__ void __launch_bounds__(kThreads)
    DecodeSplitKernel(DecodeAttentionParams p, int64_t chunk, float* ws) {
  const int h = blockIdx.y, s = blockIdx.x, lane = threadIdx.x & 31;
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t count =
      p.rows != nullptr ? min(int64_t{p.row_counts[h]}, p.n_rows) : p.n_rows;
  const int64_t begin = s * chunk;
  const int64_t end = min(count, begin + chunk);
  const T* k = static_cast<const T*>(p.k) + (h / group) * p.head_stride;
  const T* v = static_cast<const T*>(p.v) + (h / group) * p.head_stride;
  const int32_t* list =
      p.rows != nullptr ? p.rows + h * p.rows_stride : nullptr;
  float q[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int d = lane + 32 * j;
    q[j] = d < p.head_dim ? p.q[int64_t{h} * p.head_dim + d] : 0.0f;
  }
  State<kPer> st;
#pragma unroll
  for (int j = 0; j < kPer; ++j) st.acc[j] = 0.0f;
  const int warp = threadIdx.x >> 5;
  AttendRange<T, kPer>(k, v, p.row_stride, list, begin + warp * kUnroll, end,
                       int64_t{kWarps} * kUnroll, p.head_dim, p.scale, q, st);
  float* slot = ws == nullptr
                    ? nullptr
                    : ws + (int64_t{h} * gridDim.x + s) * (p.head_dim + 2);
  MergeAndStore<kPer>(st, p.head_dim, p.out + int64_t{h} * p.head_dim, slot);
}

// grid n_heads: merges the splits' slots of one head into out.
__global__ void DecodeCombineKernel(const float* __restrict__ ws, int splits,
                                    int head_dim, float* __restrict__ out) {
  const int h = blockIdx.x;
  const float* base = ws + int64_t{h} * splits * (head_dim + 2);
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, base[s * (head_dim + 2)]);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float l = 0.0f, a = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float* slot = base + s * (head_dim + 2);
      if (slot[0] == -INFINITY) continue;
      const float f = expf(slot[0] - m);
      l += slot[1] * f;
      a += slot[2 + d] * f;
    }
    out[int64_t{h} * head_dim + d] = l > 0.0f ? a / l : 0.0f;
  }
}

bool Valid(const DecodeAttentionParams& p) {
  return p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0 &&
         p.head_dim > 0 && p.head_dim <= 256 && p.n_rows >= 0 &&
         p.n_heads <= 65535 && (p.rows == nullptr || p.row_counts != nullptr);
}

}  // namespace

int DecodeAttentionSplits(int n_heads, int64_t n_rows) {
  const int64_t by_rows = detail::DivUp(n_rows, kMinRowsPerSplit);
  const int64_t by_fill = detail::DivUp(kTargetBlocks, std::max(1, n_heads));
  return static_cast<int>(
      std::clamp<int64_t>(std::min(by_rows, by_fill), 1, kMaxSplits));
}

size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionParams& p) {
  const int splits = DecodeAttentionSplits(p.n_heads, p.n_rows);
  if (splits == 1) return 0;
  return sizeof(float) * static_cast<size_t>(p.n_heads) * splits *
         (p.head_dim + 2);
}

cudaError_t DecodeAttention(const DecodeAttentionParams& p, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream) {
  if (!Valid(p)) return cudaErrorInvalidValue;
  const int splits = DecodeAttentionSplits(p.n_heads, p.n_rows);
  if (workspace_bytes < DecodeAttentionWorkspaceBytes(p)) {
    return cudaErrorInvalidValue;
  }
  const int64_t chunk = std::max<int64_t>(1, detail::DivUp(p.n_rows, splits));
  float* ws = splits > 1 ? static_cast<float*>(workspace) : nullptr;
  const dim3 grid(splits, p.n_heads);
  CKV_CUDA_RETURN_IF_ERROR(detail::DispatchKvType(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    return detail::DispatchPerLane(p.head_dim, [&](auto per) {
      constexpr int kPer = decltype(per)::kValue;
      DecodeSplitKernel<T, kPer><<<grid, kThreads, 0, stream>>>(p, chunk, ws);
      return cudaGetLastError();
    });
  }));
  if (splits == 1) return cudaSuccess;
  DecodeCombineKernel<<<p.n_heads, 128, 0, stream>>>(ws, splits, p.head_dim,
                                                    p.out);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
