#include "kernels/cuda/attention_spans.h"

#include "kernels/cuda/attention_emit.cuh"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/common.cuh"
#include "kernels/dtype.h"

namespace ckv::kernels::cuda {
namespace {

using detail::WarpSum;
using device::AttnSpanDesc;

// Element d of row `row` of a head_dim-wide F32/F16/BF16 row array.
__device__ __forceinline__ float Element(const void* base, int32_t dtype,
                                         int64_t row, int head_dim, int d) {
  const int64_t i = row * head_dim + d;
  if (dtype == static_cast<int32_t>(DType::kF16)) {
    return __half2float(static_cast<const __half*>(base)[i]);
  }
  if (dtype == static_cast<int32_t>(DType::kBF16)) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
  return static_cast<const float*>(base)[i];
}

// One (query row, head) th's combined result (detail::EmitRow), by every
// thread of the block.
template <class SumFn>
__device__ void EmitCombined(const SpanAttentionParams& p, int64_t th,
                             float big, float total, SumFn sum_of) {
  detail::EmitRow(p, th, big, total, threadIdx.x, blockDim.x, sum_of,
                  [] { __syncthreads(); });
}

__global__ void SpanFinishKernel(const float* state, int64_t n, int head_dim,
                                 float* out) {
  const int64_t i = blockIdx.x;
  const float* st = state + i * (head_dim + 2);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    out[i * head_dim + d] = st[1] > 0.0f ? st[2 + d] / st[1] : 0.0f;
  }
}

// kPer: ceil(head_dim / 32) elements of q, and of the accumulator, per lane.
template <int kPer>
__global__ void __launch_bounds__(kSpanAttentionThreads)
    SpanAttentionKernel(SpanAttentionParams p) {
  constexpr int kWarps = kSpanAttentionWarps;
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kPer * 32];
  const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t off = (int64_t{t} * p.n_heads + h) * p.head_dim;
  const int64_t q_pos = p.q_pos[t];
  float q[kPer], acc[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int d = lane + 32 * j;
    q[j] = d < p.head_dim ? p.q[off + d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t table = p.row_heads ? int64_t{t} * p.n_heads + h : h;
  const int first = p.heads[2 * table], count = p.heads[2 * table + 1];
  for (int s = first; s < first + count; ++s) {
    const AttnSpanDesc sp = p.spans[s];
    const void* kb = reinterpret_cast<const void*>(sp.k);
    const void* vb = reinterpret_cast<const void*>(sp.v);
    int64_t r_first = 0, r_last = 0;
    device::SpanRange(sp, reinterpret_cast<const int64_t*>(sp.range_at),
                      &r_first, &r_last);
    const int64_t n = r_last - r_first;
    const int32_t* rows = reinterpret_cast<const int32_t*>(sp.rows);
    const int64_t* pos = reinterpret_cast<const int64_t*>(sp.positions);
    if (rows != nullptr) rows += r_first;
    if (pos != nullptr) pos += r_first;
    // Split `split` of p.splits takes its share of every span's rows.
    const int64_t chunk = (n + p.splits - 1) / p.splits;
    const int64_t lo = split * chunk;
    const int64_t hi = lo + chunk < n ? lo + chunk : n;
    for (int64_t r = lo + warp; r < hi; r += kWarps) {
      const int64_t row = rows != nullptr ? rows[r] : r;
      const int64_t kp = pos != nullptr ? pos[r] : sp.first_pos + row;
      if (kp > q_pos || (p.window > 0 && q_pos - kp >= p.window)) continue;
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int d = lane + 32 * j;
        if (d < p.head_dim) {
          dot = fmaf(q[j], Element(kb, sp.dtype, row, p.head_dim, d), dot);
        }
      }
      float score = WarpSum(dot) * p.scale;
      if (p.softcap > 0.0f) score = p.softcap * tanhf(score / p.softcap);
      const float m_new = fmaxf(m, score);
      const float keep = expf(m - m_new);  // 0 when m was -inf
      const float w = expf(score - m_new);
      l = l * keep + w;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int d = lane + 32 * j;
        const float v =
            d < p.head_dim ? Element(vb, sp.dtype, row, p.head_dim, d) : 0.0f;
        acc[j] = fmaf(w, v, acc[j] * keep);
      }
      m = m_new;
    }
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) s_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float big = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) big = fmaxf(big, s_m[w]);
  float total = 0.0f, f[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    f[w] = s_l[w] > 0.0f ? expf(s_m[w] - big) : 0.0f;
    total += s_l[w] * f[w];
  }
  if (p.splits == 1) {
    EmitCombined(p, int64_t{t} * p.n_heads + h, big, total, [&](int d) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += s_acc[w][d] * f[w];
      return sum;
    });
    return;
  }
  // A partial: (max, sum of weights, unnormalised accumulator) of this
  // split, merged by SpanMergeKernel.
  float* part = p.workspace + ((int64_t{split} * p.n_q + t) * p.n_heads + h) *
                                  (p.head_dim + 2);
  if (threadIdx.x == 0) {
    part[0] = big;
    part[1] = total;
  }
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_acc[w][d] * f[w];
    part[2 + d] = sum;
  }
}

// One block per (query row, head): the splits' partials into `out`.
__global__ void SpanMergeKernel(SpanAttentionParams p) {
  const int t = blockIdx.x, h = blockIdx.y;
  const int64_t stride = int64_t{p.n_q} * p.n_heads * (p.head_dim + 2);
  const float* part =
      p.workspace + (int64_t{t} * p.n_heads + h) * (p.head_dim + 2);
  float big = -INFINITY;
  for (int s = 0; s < p.splits; ++s) {
    if (part[s * stride + 1] > 0.0f) big = fmaxf(big, part[s * stride]);
  }
  float total = 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    const float l = part[s * stride + 1];
    if (l > 0.0f) total += l * expf(part[s * stride] - big);
  }
  EmitCombined(p, int64_t{t} * p.n_heads + h, big, total, [&](int d) {
    float sum = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float l = part[s * stride + 1];
      if (l > 0.0f)
        sum += part[s * stride + 2 + d] * expf(part[s * stride] - big);
    }
    return sum;
  });
}

}  // namespace

cudaError_t SpanAttention(const SpanAttentionParams& p, cudaStream_t stream) {
  if (p.n_q < 0 || p.n_heads < 0 || p.n_heads > 65535 || p.splits < 1 ||
      p.splits > kMaxSpanAttentionSplits ||
      (p.splits > 1 && p.workspace == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.n_q == 0 || p.n_heads == 0) return cudaSuccess;
  if (UsesAttentionTiles(p)) return TileAttention(p, stream);
  CKV_CUDA_RETURN_IF_ERROR(detail::DispatchPerLane(p.head_dim, [&](auto per) {
    constexpr int kPer = decltype(per)::kValue;
    SpanAttentionKernel<kPer>
        <<<SpanAttentionGrid(p), kSpanAttentionThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }));
  if (p.splits == 1) return cudaSuccess;
  SpanMergeKernel<<<dim3(static_cast<unsigned>(p.n_q),
                         static_cast<unsigned>(p.n_heads)),
                    128, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t SpanAttentionFinish(const float* state, int64_t n, int head_dim,
                                float* out, cudaStream_t stream) {
  if (n < 0 || n > 0x7fffffff || head_dim <= 0 || state == nullptr ||
      out == nullptr) {
    return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  SpanFinishKernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(state, n,
                                                                 head_dim, out);
  return cudaGetLastError();
}

}  // namespace ckv::kernels::cuda
