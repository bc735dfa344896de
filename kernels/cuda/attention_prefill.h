// Causal prefill attention, flash-style: queries are processed in tiles of
// 16 against KV tiles of 32 rows staged in shared memory, with an online
// softmax; no n_q x n_rows score matrix is ever stored. Matches
// kernels::ref::Attention with one span per head (rows [0, n_rows), positions
// first_pos + i) and per-query positions q_pos: a query attends only rows
// at positions <= its own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

struct PrefillAttentionParams {
  const float* q = nullptr;       // [n_q][n_heads][head_dim]
  const int64_t* q_pos = nullptr;  // device [n_q], any order
  int n_q = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // divides n_heads (GQA: head h reads KV h / group)
  int head_dim = 0;    // 1..256
  float scale = 0.0f;
  // KV head g, row i: k + g * head_stride + i * row_stride elements of
  // dtype (kF32, kF16, kBF16); row i is at position first_pos + i.
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kF16;
  int64_t head_stride = 0;
  int64_t row_stride = 0;
  int64_t n_rows = 0;
  int64_t first_pos = 0;
  float* out = nullptr;  // [n_q][n_heads][head_dim]; zeros if nothing visible
};

cudaError_t PrefillAttention(const PrefillAttentionParams& p,
                             cudaStream_t stream);

}  // namespace ckv::kernels::cuda
