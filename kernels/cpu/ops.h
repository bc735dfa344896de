// CPU compute ops. Each op has a simple scalar reference (namespace ref) that
// is the oracle, and a fast version (namespace ckv::kernels::cpu) that is
// vectorised (run-time CPU feature dispatch) and multi-threaded over a
// ThreadPool. tests/kernels checks every fast op against its reference on
// random inputs and odd sizes.
//
// Conventions: row-major; a "row" is contiguous. Weights are stored as GGUF
// stores them: W[out][in] with `in` contiguous. All activations are F32.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu {

class ThreadPool;

// Rotary embedding variant. kNormal rotates adjacent pairs (x[2i], x[2i+1])
// (GGML rope mode 0, used by `llama`); kNeox rotates (x[i], x[i + d/2])
// (mode 2, used by `qwen2`).
enum class RopeMode { kNormal, kNeox };

struct RopeParams {
  RopeMode mode = RopeMode::kNormal;
  int rot_dims = 0;  // leading dims rotated per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // linear position scaling (1 = none)
  const float* freq_factors = nullptr;  // optional [rot_dims/2]: theta_i /= f_i
  float attn_factor = 1.0f;  // multiplies cos and sin (Phi-3 LongRoPE)
};

// One run of cached keys/values a query may attend to. Row r (r < count) of
// the run is the stored row i = rows[r] when `rows` is set (an index list:
// any order, gaps allowed), else i = r; it is at k + i*stride (elements of
// `dtype`), and its sequence position is positions[r] when `positions` is
// set, else first_pos + row_positions[i] when `row_positions` is set (rows
// stored out of position order), else first_pos + i. A query at position p
// attends only rows with
// position <= p (causal). Spans of one query head must not overlap; their
// union is what that head attends.
struct KvSpan {
  const void* k = nullptr;
  const void* v = nullptr;
  DType dtype = DType::kF32;  // kF32, kF16 or kBF16
  int64_t stride = 0;         // elements between consecutive rows
  int64_t count = 0;          // rows in the run
  int64_t first_pos = 0;
  const int64_t* positions = nullptr;  // optional, ascending not required
  const int32_t* rows = nullptr;       // optional [count] stored-row indices
  // Optional, per stored row (not per r): position - first_pos.
  const int32_t* row_positions = nullptr;
};

// Sequence position of row r of span `s` (the contract above).
inline int64_t SpanRowPosition(const KvSpan& s, int64_t r) {
  if (s.positions != nullptr) return s.positions[r];
  const int64_t i = s.rows != nullptr ? s.rows[r] : r;
  return s.first_pos + (s.row_positions != nullptr ? s.row_positions[i] : i);
}

struct KvSpanList {
  const KvSpan* spans = nullptr;
  int count = 0;
};

// Arguments of multi-head attention for n_q query tokens.
struct AttentionArgs {
  const float* q = nullptr;        // [n_q][n_heads][head_dim]
  const int64_t* q_pos = nullptr;  // [n_q] sequence position of each query
  int n_q = 0;
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;              // usually 1/sqrt(head_dim)
  const KvSpanList* kv = nullptr;  // [n_heads]: what each query head attends
  float* out = nullptr;            // [n_q][n_heads][head_dim]
  // > 0: scores s = q.k * scale become softcap * tanh(s / softcap) before
  // the softmax (Gemma-2 attention logit soft-capping).
  float softcap = 0.0f;
  // > 0: sliding window; a query at position p attends only keys at
  // positions k with p - window < k <= p (`window` keys including itself).
  int64_t window = 0;
};

// ---------------------------------------------------------------- reference
namespace ref {

// y[t][o] = sum_i W[o][i] * x[t][i]; W is [n_out][n_in] of type wtype.
void MatMul(DType wtype, const void* w, int64_t n_in, int64_t n_out,
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

}  // namespace ref

// --------------------------------------------------------------------- fast
// Same contracts as ref::, parallelised over `pool` (may be null: one thread).
void MatMul(ThreadPool* pool, DType wtype, const void* w, int64_t n_in,
            int64_t n_out, const float* x, int64_t n_tokens, float* y);
void RmsNorm(ThreadPool* pool, const float* x, const float* weight,
             int64_t n_rows, int64_t n, float eps, float* y);
void Rope(ThreadPool* pool, float* x, int64_t n_tokens, int n_heads,
          int head_dim, const int64_t* positions, const RopeParams& p);
void SwiGlu(ThreadPool* pool, const float* gate, const float* up, int64_t n,
            float* out);
void GeluTanhGate(ThreadPool* pool, const float* gate, const float* up,
                  int64_t n, float* out);
void SoftCap(ThreadPool* pool, float* x, int64_t n, float cap);
void AddBias(float* x, const float* bias, int64_t n_rows, int64_t n);
void Add(float* x, const float* y, int64_t n);
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);
// Flash-style (online softmax, tiled): memory independent of context length.
void Attention(ThreadPool* pool, const AttentionArgs& a);

// Name of the kernel set chosen at run time (e.g. "avx512", "avx2", "scalar").
const char* KernelSetName();

// How the active kernel set multiplies weights of type t by a few tokens
// (decode): "f32 dot" (float weights, or the scalar table's dequantise-then-
// dot reference on block types), "int8 dot, unpacked blocks" or "int8 dot,
// fused blocks" (AVX2 Q8_0/Q4_0/Q2_K..Q6_K). For the benchmarks' reports.
const char* QuantDotPath(DType t);

// Forces the kernel set of every fast op for the whole process: "auto" (the
// best for this CPU), "scalar" (the reference path: F32 activations, exact
// dequantisation), "avx2" or "avx512". False (nothing changed) when the name
// is unknown or this CPU or build lacks the instruction set. Call before ops
// run (not thread-safe against running ops).
bool SelectKernels(const char* name);

}  // namespace ckv::kernels::cpu
