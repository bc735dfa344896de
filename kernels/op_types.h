// The argument types of the compute ops every backend implements (the
// references in kernels/ref/, the CPU's fast ops in kernels/cpu/, device
// kernels): no backend's headers, only dtype.h.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels {

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
  // Only in spans a device backend attends, never read on the host: a
  // device address of int64 {first, n}, written on the device; the span is
  // then rows / positions [first, first + n) of the lists at `rows` and
  // `positions` (device addresses of `count` entries each; n is clamped to
  // count - first). A device planner's row lists (model/kv/store_env.h).
  const int64_t* device_range = nullptr;
  // With device_range: the rows at k and v the lists may name.
  int64_t rows_extent = 0;
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

}  // namespace ckv::kernels
