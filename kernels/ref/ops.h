// The reference compute ops: one simple scalar implementation per op,
// clarity over speed, accumulation in double. They are the oracle every
// faster path is tested against -- the CPU's kernel tables
// (kernels/cpu/ops.h, tests/kernels) and every Backend's ops (tests/ops:
// the CPU backend, the device backend on the fake device, CUDA). Neutral:
// no backend's headers, no thread pool.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/op_types.h"

namespace ckv::kernels::ref {

// y[t][o] = sum_i W[o][i] * x[t][i]; W is [n_out][n_in] of type wtype.
void MatMul(DType wtype, const void* w, int64_t n_in, int64_t n_out,
            const float* x, int64_t n_tokens, float* y);
// MatMul with both operands rounded to BF16 (nearest even) before the
// products, summed in double: the reference of the BF16 GEMM.
void MatMulBf16(DType wtype, const void* w, int64_t n_in, int64_t n_out,
                const float* x, int64_t n_tokens, float* y);
// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, rows of n (y may be x).
void RmsNorm(const float* x, const float* weight, int64_t n_rows, int64_t n,
             float eps, float* y);
// In place on x: [n_tokens][n_heads][head_dim]; positions [n_tokens].
void Rope(float* x, int64_t n_tokens, int n_heads, int head_dim,
          const int64_t* positions, const RopeParams& p);
// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);
// out[i] = gelu(gate[i]) * up[i] with the tanh form of GELU:
// gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
void GeluTanhGate(const float* gate, const float* up, int64_t n, float* out);
// x[i] = cap * tanh(x[i] / cap) in place; cap > 0.
void SoftCap(float* x, int64_t n, float cap);
// Adds bias[n] to each of n_rows rows of x.
void AddBias(float* x, const float* bias, int64_t n_rows, int64_t n);
// x += y elementwise.
void Add(float* x, const float* y, int64_t n);
// Converts one row of n elements of type t to F32.
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);
// Softmax attention, exact two-pass, double accumulation.
void Attention(const AttentionArgs& a);
// Attention in pieces (a long KV attended chunk by chunk, each chunk's rows
// in a.kv): state holds, per (query row, head), head_dim + 2 floats: the
// largest visible score m, the weights' sum l = sum exp(s - m) and the
// unnormalised acc[d] = sum exp(s - m) v[d] over the rows folded in so far
// (l == 0: none visible yet). AttentionAccumulate folds a.kv's visible rows
// into state (fresh: state starts empty, its contents are not read);
// AttentionFinish writes out[i] = acc / l, zeros where l == 0, for n
// (query row, head) pairs. Accumulating every chunk of a head's rows, in any
// split and order, then finishing equals Attention over all of them (up to
// the F32 rounding of the state between chunks).
void AttentionAccumulate(const AttentionArgs& a, float* state, bool fresh);
void AttentionFinish(const float* state, int64_t n, int head_dim, float* out);

}  // namespace ckv::kernels::ref
