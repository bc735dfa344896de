// Prefill attention on tensor cores (issue 29, GPU.md "paged prefill
// attention on tensor cores"): SpanAttention's contract (attention_spans.h;
// kernels::ref::Attention's semantics) for a launch whose query rows share
// one head table (row_heads false, one split) and whose spans all hold F16
// or BF16 rows (kv_dtype), head_dim a multiple of 16 up to 256, at least
// kMinTileQueries rows. SpanAttention takes this path by itself when
// UsesAttentionTiles(p).
//
// One block of kTileWarps warps per (kTileQueries query rows, head): each
// kTileKeys-row tile of each span is gathered (row lists, positions) into
// shared memory once for all the block's queries; S = Q K^T and O += P V
// are 16x16x16 WMMA products with F32 accumulation, Q and P each split
// into a high and a low 16-bit part (two products each), so scores and
// weights keep close to F32 precision (error about 2^-17 of |q||k| for
// BF16, 2^-21 for F16, beyond the rows' own rounding); an online softmax
// per row with the reference's masking (causal by position, sliding
// window) and soft-capping. A tile no query of the block can see (every
// key after the block's last position, or before its window) is skipped.
// Contract difference: a non-finite V row in a tile poisons (NaN) the
// rows of the block that do not see it (a zero weight times inf).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_spans.h"
#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

inline constexpr int kTileQueries = 64;  // 16 rows per warp
inline constexpr int kTileKeys = 32;     // one key per lane in the softmax
inline constexpr int kTileWarps = kTileQueries / 16;
inline constexpr int kTileThreads = 32 * kTileWarps;
inline constexpr int kMinTileQueries = 16;

// Shared-memory layout of one block (byte offsets, each 128-aligned;
// leading dimensions in elements, padded against bank conflicts and
// multiples of 8 (16-bit) / 4 (F32) as WMMA requires).
struct TileLayout {
  int ldh = 0;  // Q, K, V rows (16-bit)
  int ldo = 0;  // O rows (F32)
  int lds = 0;  // S rows (F32)
  int ldp = 0;  // P rows (16-bit)
  size_t o = 0, q_hi = 0, q_lo = 0, k = 0, v = 0, s = 0, p_hi = 0, p_lo = 0;
  size_t m = 0, l = 0, keep = 0, q_pos = 0, k_pos = 0, k_row = 0, flag = 0;
  size_t bytes = 0;
};

#if defined(__CUDACC__)
__host__ __device__
#endif
    inline TileLayout
    MakeTileLayout(int head_dim) {
  TileLayout t;
  t.ldh = head_dim + 8;
  t.ldo = head_dim + 4;
  t.lds = kTileKeys + 4;
  t.ldp = kTileKeys + 8;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += (bytes + 127) / 128 * 128;
    return here;
  };
  t.o = take(sizeof(float) * kTileQueries * t.ldo);
  t.q_hi = take(2 * kTileQueries * t.ldh);
  t.q_lo = take(2 * kTileQueries * t.ldh);
  t.k = take(2 * kTileKeys * t.ldh);
  t.v = take(2 * kTileKeys * t.ldh);
  t.s = take(sizeof(float) * kTileQueries * t.lds);
  t.p_hi = take(2 * kTileQueries * t.ldp);
  t.p_lo = take(2 * kTileQueries * t.ldp);
  t.m = take(sizeof(float) * kTileQueries);
  t.l = take(sizeof(float) * kTileQueries);
  t.keep = take(sizeof(float) * kTileQueries);
  t.q_pos = take(sizeof(int64_t) * kTileQueries);
  t.k_pos = take(sizeof(int64_t) * kTileKeys);
  t.k_row = take(sizeof(int64_t) * kTileKeys);
  t.flag = take(sizeof(int));
  t.bytes = at;
  return t;
}

// Whether SpanAttention runs p on the tiles (host, pure).
inline bool UsesAttentionTiles(const SpanAttentionParams& p) {
  const bool sixteen_bit = p.kv_dtype == static_cast<int32_t>(DType::kF16) ||
                           p.kv_dtype == static_cast<int32_t>(DType::kBF16);
  return p.tiles && sixteen_bit && !p.row_heads && p.splits == 1 &&
         p.n_q >= kMinTileQueries && p.head_dim > 0 && p.head_dim % 16 == 0 &&
         p.head_dim <= 256;
}

// Grid (ceil(n_q / kTileQueries), n_heads) of kTileThreads threads.
inline dim3 AttentionTileGrid(const SpanAttentionParams& p) {
  return dim3(static_cast<unsigned>((p.n_q + kTileQueries - 1) / kTileQueries),
              static_cast<unsigned>(p.n_heads));
}

// The tile kernel (UsesAttentionTiles(p) must hold; else
// cudaErrorInvalidValue).
cudaError_t TileAttention(const SpanAttentionParams& p, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
