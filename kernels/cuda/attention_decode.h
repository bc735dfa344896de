// Decode attention: one query token per head over a KV cache, dense (rows
// [0, n_rows)) or sparse (a per-query-head index list of rows, ClusterKV's
// selected tokens plus sinks, tail and current token). Matches
// kernels::ref::Attention with one span per head (rows = the index list) and
// a query position after every row. Split-K: the rows are cut into chunks
// processed by separate blocks (online softmax each), then merged.
// Plan/run split: DecodeAttentionWorkspaceBytes (host, pure) sizes the
// workspace for a given shape; DecodeAttention runs it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

struct DecodeAttentionParams {
  const float* q = nullptr;  // [n_heads][head_dim]
  int n_heads = 0;
  int n_kv_heads = 0;  // divides n_heads; query head h reads KV head
                       // h / (n_heads / n_kv_heads)
  int head_dim = 0;    // 1..256
  float scale = 0.0f;
  // KV head g, row i: k + g * head_stride + i * row_stride (elements of
  // dtype: kF32, kF16 or kBF16); same layout for v.
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kF16;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  // Dense (rows == null): every head attends rows [0, n_rows).
  // Sparse: head h attends rows[h * rows_stride + r], r < row_counts[h]
  // (any order; duplicates count twice, as in the reference); n_rows is a
  // host-known upper bound of every row_counts[h] (it sizes the split).
  int64_t n_rows = 0;
  const int32_t* rows = nullptr;
  const int32_t* row_counts = nullptr;
  int64_t rows_stride = 0;
  float* out = nullptr;  // [n_heads][head_dim]; zeros for a head with no rows
};

// Chunks the rows are split into (pure function of the shape).
int DecodeAttentionSplits(int n_heads, int64_t n_rows);
// Workspace bytes DecodeAttention needs for this shape (0 when unsplit).
size_t DecodeAttentionWorkspaceBytes(const DecodeAttentionParams& p);
cudaError_t DecodeAttention(const DecodeAttentionParams& p, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream);

}  // namespace ckv::kernels::cuda
