// Attention over span tables (the device backend's attention op): query
// head h of query row t attends the spans (kernels/device/op_tables.h
// AttnSpanDesc) heads[2h] .. heads[2h] + heads[2h + 1], exactly the
// contract of kernels::ref::Attention (causal by position, optional sliding
// window and soft-capping; a head with no visible key writes zeros). K/V
// rows are F32, F16 or BF16 in device memory, head_dim <= 256.
// One block of kSpanAttentionWarps warps per (query row, head, split):
// each warp runs an online softmax over every kSpanAttentionWarps-th row of
// the split's share of each span, the warps' partials merge in shared
// memory, and with splits > 1 a second kernel merges the splits. A
// prefill launch over F16/BF16 rows runs on tensor cores instead
// (attention_tiles.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device/op_tables.h"

namespace ckv::kernels::cuda {

inline constexpr int kSpanAttentionWarps = 4;

struct SpanAttentionParams {
  const float* q = nullptr;        // [n_q][n_heads][head_dim]
  const int64_t* q_pos = nullptr;  // [n_q]
  const device::AttnSpanDesc* spans = nullptr;
  // [n_heads][2]: first span, count; row_heads: [n_q][n_heads][2], each
  // query row its own (a batch of sequences).
  const int32_t* heads = nullptr;
  bool row_heads = false;
  float* out = nullptr;            // [n_q][n_heads][head_dim]
  int n_q = 0, n_heads = 0, head_dim = 0;
  float scale = 0.0f, softcap = 0.0f;
  int64_t window = 0;
  // Split-K: each span's rows are cut into `splits` chunks attended by
  // separate blocks (grid z), whose partials (max, weight sum, unnormalised
  // accumulator: head_dim + 2 floats per split x query row x head, in
  // `workspace`) a second kernel merges. 1: no workspace.
  int splits = 1;
  float* workspace = nullptr;
  // Streamed attention (a part's rows attended chunk by chunk): non-null,
  // the launch folds its rows into state ([n_q][n_heads][head_dim + 2]:
  // max, weight sum, unnormalised accumulator; fresh: starts empty, not
  // read) instead of writing out (ref::AttentionAccumulate).
  float* state = nullptr;
  bool fresh = false;
  // Every span's dtype (kernels::DType) when they all share one, else -1:
  // F16 and BF16 let a prefill launch run on tensor cores
  // (attention_tiles.h, UsesAttentionTiles); tiles false keeps it on the
  // span kernel (tests compare the two).
  int32_t kv_dtype = -1;
  bool tiles = true;
};

inline constexpr int kMaxSpanAttentionSplits = 64;

// Launch geometry (host, pure): grid (n_q, n_heads, splits), this many
// threads.
// Query rows go on x (up to 2^31 - 1: a prefill chunk of any size), heads
// on y (gridDim.y <= 65535).
inline dim3 SpanAttentionGrid(const SpanAttentionParams& p) {
  return dim3(static_cast<unsigned>(p.n_q), static_cast<unsigned>(p.n_heads),
              static_cast<unsigned>(p.splits));
}
inline constexpr int kSpanAttentionThreads = 32 * kSpanAttentionWarps;

cudaError_t SpanAttention(const SpanAttentionParams& p, cudaStream_t stream);
// out[i] = acc / l of n streamed states (zeros where l == 0):
// ref::AttentionFinish.
cudaError_t SpanAttentionFinish(const float* state, int64_t n, int head_dim,
                                float* out, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
