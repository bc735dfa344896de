#include "kernels/cuda/attention_tiles.h"

#include <mma.h>

#include "kernels/cuda/attention_emit.cuh"
#include "kernels/cuda/common.cuh"

namespace ckv::kernels::cuda {
namespace {

using detail::WarpMax;
using detail::WarpSum;
using device::AttnSpanDesc;
namespace wmma = nvcuda::wmma;

__device__ __forceinline__ __half To16(float x, __half) {
  return __float2half_rn(x);
}
__device__ __forceinline__ __nv_bfloat16 To16(float x, __nv_bfloat16) {
  return __float2bfloat16_rn(x);
}

// x as a high and a low 16-bit part (hi + lo carries x to about 2^-17 of
// it for BF16, 2^-21 for F16).
template <class T>
__device__ __forceinline__ void Split(float x, T* hi, T* lo) {
  const T h = To16(x, T{});
  *hi = h;
  *lo = To16(x - detail::ToF32(h), T{});
}

// Eight 16-bit elements (16 bytes) at p: one vector load when p is 16-byte
// aligned (`aligned`), else eight element loads.
__device__ __forceinline__ uint4 Load8(const char* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint4*>(p);
  uint4 v;
  uint16_t* e = reinterpret_cast<uint16_t*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = reinterpret_cast<const uint16_t*>(p)[i];
  return v;
}

template <class T>
struct TileSmem {
  float *o, *s, *m, *l, *keep;
  T *q_hi, *q_lo, *k, *v, *p_hi, *p_lo;
  int64_t *q_pos, *k_pos, *k_row;
  int* flag;
};

template <class T>
__device__ TileSmem<T> Carve(unsigned char* base, const TileLayout& L) {
  TileSmem<T> s;
  s.o = reinterpret_cast<float*>(base + L.o);
  s.s = reinterpret_cast<float*>(base + L.s);
  s.m = reinterpret_cast<float*>(base + L.m);
  s.l = reinterpret_cast<float*>(base + L.l);
  s.keep = reinterpret_cast<float*>(base + L.keep);
  s.q_hi = reinterpret_cast<T*>(base + L.q_hi);
  s.q_lo = reinterpret_cast<T*>(base + L.q_lo);
  s.k = reinterpret_cast<T*>(base + L.k);
  s.v = reinterpret_cast<T*>(base + L.v);
  s.p_hi = reinterpret_cast<T*>(base + L.p_hi);
  s.p_lo = reinterpret_cast<T*>(base + L.p_lo);
  s.q_pos = reinterpret_cast<int64_t*>(base + L.q_pos);
  s.k_pos = reinterpret_cast<int64_t*>(base + L.k_pos);
  s.k_row = reinterpret_cast<int64_t*>(base + L.k_row);
  s.flag = reinterpret_cast<int*>(base + L.flag);
  return s;
}

// S (the warp's 16 rows x kTileKeys) = (Q_hi + Q_lo) K^T (Q holds the
// scaled queries).
template <class T>
__device__ void TileScores(const TileSmem<T>& sm, const TileLayout& L,
                           int head_dim, int row0) {
  for (int j = 0; j < kTileKeys / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < head_dim / 16; ++kk) {
      // K^T as a column-major 16 x 16 block: element (d, key) at
      // k[key * ldh + d].
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
      wmma::load_matrix_sync(b, sm.k + j * 16 * L.ldh + kk * 16, L.ldh);
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::load_matrix_sync(a, sm.q_hi + row0 * L.ldh + kk * 16, L.ldh);
      wmma::mma_sync(acc, a, b, acc);
      wmma::load_matrix_sync(a, sm.q_lo + row0 * L.ldh + kk * 16, L.ldh);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(sm.s + row0 * L.lds + j * 16, acc, L.lds,
                            wmma::mem_row_major);
  }
}

// The online softmax of the warp's 16 rows over the tile (lane = key):
// masked, soft-capped scores; the rows' running max and weight
// sum updated; P (hi, lo) written; keep[r] = the factor O's row r takes.
template <class T>
__device__ void TileSoftmax(const TileSmem<T>& sm, const TileLayout& L,
                            const SpanAttentionParams& p, int row0, int lane) {
  const int64_t kp = sm.k_pos[lane];
  for (int i = 0; i < 16; ++i) {
    const int r = row0 + i;
    const int64_t qp = sm.q_pos[r];
    const bool hidden = kp > qp || (p.window > 0 && qp - kp >= p.window);
    float score = sm.s[r * L.lds + lane];  // scaled (q was)
    if (p.softcap > 0.0f) score = p.softcap * tanhf(score / p.softcap);
    if (hidden) score = -INFINITY;
    const float m_old = sm.m[r];
    const float m_new = fmaxf(m_old, WarpMax(score));
    float w = 0.0f, keep = 1.0f;
    if (m_new != -INFINITY) {
      w = hidden ? 0.0f : expf(score - m_new);
      keep = expf(m_old - m_new);  // 0 when m_old is -inf
    }
    const float sum = WarpSum(w);
    Split(w, &sm.p_hi[r * L.ldp + lane], &sm.p_lo[r * L.ldp + lane]);
    __syncwarp();  // every lane has read m[r]
    if (lane == 0) {
      sm.m[r] = m_new;
      sm.l[r] = sm.l[r] * keep + sum;
      sm.keep[r] = keep;
    }
  }
  __syncwarp();
}

// O (the warp's 16 rows) = O * keep + (P_hi + P_lo) V.
template <class T>
__device__ void TileAccumulate(const TileSmem<T>& sm, const TileLayout& L,
                               int head_dim, int row0, int lane) {
  for (int i = 0; i < 16; ++i) {
    const float keep = sm.keep[row0 + i];
    if (keep == 1.0f) continue;
    for (int d = lane; d < head_dim; d += 32)
      sm.o[(row0 + i) * L.ldo + d] *= keep;
  }
  __syncwarp();
  for (int c = 0; c < head_dim / 16; ++c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, sm.o + row0 * L.ldo + c * 16, L.ldo,
                           wmma::mem_row_major);
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
      wmma::load_matrix_sync(b, sm.v + kk * 16 * L.ldh + c * 16, L.ldh);
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::load_matrix_sync(a, sm.p_hi + row0 * L.ldp + kk * 16, L.ldp);
      wmma::mma_sync(acc, a, b, acc);
      wmma::load_matrix_sync(a, sm.p_lo + row0 * L.ldp + kk * 16, L.ldp);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(sm.o + row0 * L.ldo + c * 16, acc, L.ldo,
                            wmma::mem_row_major);
  }
}

// The warp's rows out (detail::EmitRow over its 32 lanes).
template <class T>
__device__ void TileEmit(const TileSmem<T>& sm, const TileLayout& L,
                         const SpanAttentionParams& p, int t0, int n_rows,
                         int row0, int lane) {
  for (int i = 0; i < 16 && row0 + i < n_rows; ++i) {
    const int r = row0 + i;
    const float* o = sm.o + r * L.ldo;
    detail::EmitRow(
        p, int64_t{t0 + r} * p.n_heads + blockIdx.y, sm.m[r], sm.l[r], lane, 32,
        [o](int d) { return o[d]; }, [] { __syncwarp(); });
  }
}

template <class T>
__global__ void __launch_bounds__(kTileThreads)
    TileAttentionKernel(SpanAttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int hd = p.head_dim, h = blockIdx.y;
  const TileLayout L = MakeTileLayout(hd);
  const TileSmem<T> sm = Carve<T>(smem, L);
  const int tid = threadIdx.x, lane = tid & 31, row0 = (tid >> 5) * 16;
  const int t0 = blockIdx.x * kTileQueries;
  const int n_rows = min(kTileQueries, p.n_q - t0);
  // The block's queries (rows past n_q: zeros at position -1, which sees
  // no key), O zeroed, the running max and sum reset.
  for (int i = tid; i < kTileQueries * hd; i += kTileThreads) {
    const int r = i / hd, d = i % hd;
    // Scaled first: S comes out scaled, and F16's range (65,504) binds
    // only queries 1 / scale times larger.
    const float x =
        r < n_rows ? p.q[(int64_t{t0 + r} * p.n_heads + h) * hd + d] * p.scale
                   : 0.0f;
    Split(x, &sm.q_hi[r * L.ldh + d], &sm.q_lo[r * L.ldh + d]);
  }
  for (int i = tid; i < kTileQueries * L.ldo; i += kTileThreads) sm.o[i] = 0;
  if (tid < kTileQueries) {
    sm.q_pos[tid] = tid < n_rows ? p.q_pos[t0 + tid] : -1;
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  __syncthreads();
  int64_t q_lo = INT64_MAX, q_hi = INT64_MIN;
  for (int r = 0; r < n_rows; ++r) {
    const int64_t qp = sm.q_pos[r];
    q_lo = qp < q_lo ? qp : q_lo;
    q_hi = qp > q_hi ? qp : q_hi;
  }
  const int first = p.heads[2 * h], count = p.heads[2 * h + 1];
  for (int s = first; s < first + count; ++s) {
    const AttnSpanDesc sp = p.spans[s];
    int64_t r_first = 0, r_last = 0;
    device::SpanRange(sp, reinterpret_cast<const int64_t*>(sp.range_at),
                      &r_first, &r_last);
    const int64_t n = r_last - r_first;
    const int32_t* rows = reinterpret_cast<const int32_t*>(sp.rows);
    const int64_t* pos = reinterpret_cast<const int64_t*>(sp.positions);
    if (rows != nullptr) rows += r_first;
    if (pos != nullptr) pos += r_first;
    const char* kb = reinterpret_cast<const char*>(sp.k);
    const char* vb = reinterpret_cast<const char*>(sp.v);
    const bool aligned = ((sp.k | sp.v) & 15) == 0;
    for (int64_t r0 = 0; r0 < n; r0 += kTileKeys) {
      if (tid < kTileKeys) {  // warp 0: the tile's rows and positions
        const int64_t r = r0 + tid;
        int64_t row = -1, kp = INT64_MAX;  // past the span: after every query
        if (r < n) {
          row = rows != nullptr ? rows[r] : r;
          kp = pos != nullptr ? pos[r] : sp.first_pos + row;
        }
        sm.k_row[tid] = row;
        sm.k_pos[tid] = kp;
        const bool seen =
            r < n && kp <= q_hi && (p.window <= 0 || kp + p.window > q_lo);
        const unsigned any = __ballot_sync(detail::kFullMask, seen);
        if (tid == 0) *sm.flag = any != 0;
      }
      __syncthreads();
      if (*sm.flag == 0) {  // no query of the block sees this tile
        __syncthreads();
        continue;
      }
      const int pieces = hd / 8;  // 16-byte pieces of a row
      for (int i = tid; i < kTileKeys * pieces; i += kTileThreads) {
        const int j = i / pieces, c = i % pieces;
        const int64_t row = sm.k_row[j];
        uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
        if (row >= 0) {
          const int64_t at = (row * hd + c * 8) * 2;
          kv = Load8(kb + at, aligned);
          vv = Load8(vb + at, aligned);
        }
        *reinterpret_cast<uint4*>(sm.k + j * L.ldh + c * 8) = kv;
        *reinterpret_cast<uint4*>(sm.v + j * L.ldh + c * 8) = vv;
      }
      __syncthreads();
      TileScores(sm, L, hd, row0);
      __syncwarp();
      TileSoftmax(sm, L, p, row0, lane);
      TileAccumulate(sm, L, hd, row0, lane);
      __syncthreads();  // K, V, the rows and the flag are rewritten next
    }
  }
  __syncwarp();
  TileEmit(sm, L, p, t0, n_rows, row0, lane);
}

template <class T>
cudaError_t LaunchTiles(const SpanAttentionParams& p, cudaStream_t stream) {
  const size_t bytes = MakeTileLayout(p.head_dim).bytes;
  CKV_CUDA_RETURN_IF_ERROR(
      detail::AllowSharedBytes(TileAttentionKernel<T>, bytes));
  TileAttentionKernel<T>
      <<<AttentionTileGrid(p), kTileThreads, bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t TileAttention(const SpanAttentionParams& p, cudaStream_t stream) {
  if (!UsesAttentionTiles(p) || p.n_heads > 65535 || p.q == nullptr ||
      p.q_pos == nullptr || p.heads == nullptr ||
      (p.out == nullptr && p.state == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.kv_dtype == static_cast<int32_t>(DType::kF16)) {
    return LaunchTiles<__half>(p, stream);
  }
  return LaunchTiles<__nv_bfloat16>(p, stream);
}

}  // namespace ckv::kernels::cuda
