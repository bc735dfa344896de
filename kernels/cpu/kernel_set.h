// Internal: the ISA-specific primitives behind the fast ops. One table per
// instruction set (scalar, avx2, avx512), chosen once at run time from
// GetCpuFeatures(). Drivers (matmul.cc, attention.cc) do blocking and
// threading; primitives do the inner loops. Not part of the public API.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"

namespace ckv::kernels::cpu {

// Attention key tile: rows of K/V converted per step.
inline constexpr int kTileK = 64;
// From this many tokens on, MatMul takes a GEMM path (below it, GEMVs).
inline constexpr int64_t kGemmMinTokens = 6;
// GEMM register tile: kGemmRows weight rows x kGemmCols tokens.
inline constexpr int kGemmRows = 8;
inline constexpr int kGemmCols = 32;
// BF16 GEMM register tile: kBf16Rows weight rows x kBf16Cols tokens.
inline constexpr int kBf16Rows = 32;
inline constexpr int kBf16Cols = 12;
// K-means score block: kScoreRows keys x panels of kScoreCols centroids.
inline constexpr int kScoreRows = 12;
inline constexpr int kScoreCols = 32;
// Narrow panels for few centroids (k <= kScoreColsNarrow: the default 320-
// token segment at 80 tokens per cluster has k = 4).
inline constexpr int kScoreColsNarrow = 8;
// Centroid scoring (clusterkv selection): panels of kCentroidPanel
// centroids, up to kCentroidQueries queries per call.
inline constexpr int kCentroidPanel = 16;
inline constexpr int kCentroidQueries = 8;

struct KernelSet {
  const char* name;

  // dst[i] = element i of src (type t), i < n. Q8_0 needs n % 32 == 0.
  void (*to_f32)(DType t, const void* src, int64_t n, float* dst);

  // y[r] = sum_i W_r[i] * x[i] for r < n_rows; row r of W starts at
  // w + r * row_bytes and has n_in elements of type t.
  void (*gemv)(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const float* x, float* y);

  // Register tile of the GEMM: for r < nr (<= kGemmRows), c < nc
  // (<= kGemmCols): y[c * ldy + r] = sum_k a[r][k] * xt[k * kGemmCols + c].
  // a[r] must be valid for all r < kGemmRows (padding rows may be zeros).
  void (*gemm_tile)(const float* const* a, const float* xt, int64_t k, float* y,
                    int64_t ldy, int nr, int nc);

  // The BF16 GEMM (only the AVX512_BF16 table; null elsewhere): operands
  // rounded to BF16 (nearest even) when packed, products exact, sums in F32
  // in an unspecified order. A "pair" of a row x is the 32-bit word holding
  // BF16(x[2p]) in its low and BF16(x[2p + 1]) in its high half (0 past
  // the row's n_in elements); n_pairs = (n_in + 1) / 2.
  // pack_bf16_rows: dst[p * kBf16Rows + r] = pair p of rows[r], for
  // r < kBf16Rows (every rows[r] valid; padding rows may be zeros).
  void (*pack_bf16_rows)(const float* const* rows, int64_t n_in, uint32_t* dst);
  // pack_bf16_cols: dst[p * kBf16Cols + c] = pair p of x + c * n_in for
  // c < nc (<= kBf16Cols), 0 for nc <= c < kBf16Cols.
  void (*pack_bf16_cols)(const float* x, int64_t n_in, int nc, uint32_t* dst);
  // For r < nr (<= kBf16Rows), c < nc (<= kBf16Cols): y[c * ldy + r] =
  // sum over p < n_pairs of the pair products of w[p * kBf16Rows + r] and
  // x[p * kBf16Cols + c].
  void (*gemm_bf16_tile)(const uint32_t* w, const uint32_t* x, int64_t n_pairs,
                         float* y, int64_t ldy, int nr, int nc);
  // BF16 attention tiles (the same table; null elsewhere), used by items of
  // more than 8 rows (prefill): the driver pairs the F32 tiles of load_kt /
  // load_v and the scaled queries. Contracts in attention_bf16.h.
  void (*to_pairs_bf16)(const float* src, int64_t n, uint32_t* dst);
  void (*pair_rows_bf16)(const float* a, const float* b, int n, uint32_t* dst);
  void (*qk_bf16)(const uint32_t* q2, int ldq2, int rows, const uint32_t* kt2,
                  int n_pairs, float* s);
  void (*pv_bf16)(const float* p, int rows, const uint32_t* vt2, int n, int ldv,
                  const float* alpha, float* o);

  // Attention: kt[d * kTileK + j] = K_j[d] for j < n, zeros for
  // n <= j < kTileK; d < hd. Row j of K is at k + i * stride elements with
  // i = rows[j] when `rows` is set (a gather), else i = j.
  void (*load_kt)(DType t, const void* k, int64_t stride, const int32_t* rows,
                  int n, int hd, float* kt);
  // vt[j * ldv + d] = V_j[d] for j < n, d < hd; zeros for hd <= d < ldv
  // and for rows n <= j < kTileK. ldv is a multiple of 16. Rows as load_kt.
  void (*load_v)(DType t, const void* v, int64_t stride, const int32_t* rows,
                 int n, int hd, int ldv, float* vt);
  // s[i * kTileK + j] = sum_d q[i * ldq + d] * kt[d * kTileK + j].
  void (*qk)(const float* q, int ldq, int rows, const float* kt, int hd,
             float* s);
  // Online-softmax step of one row: masks s[j] where bit j of `valid` is 0,
  // updates running max *m and sum *l, writes p[j] = exp(s[j] - m_new)
  // (0 where masked) into s, and returns the factor exp(m_old - m_new) that
  // rescales the row's output accumulator (1 when no bit is set).
  float (*softmax_row)(float* s, uint64_t valid, float* m, float* l);
  // o[i * ldv + d] = alpha[i] * o[i * ldv + d] + sum_{j<n} p[i*kTileK+j] *
  // vt[j * ldv + d] for i < rows, d < ldv.
  void (*pv)(const float* p, int rows, const float* vt, int n, int ldv,
             const float* alpha, float* o);

  // out[i] = g / (1 + exp(-g)) * up[i], g = gate[i].
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* out);

  // K-means scores (kmeans.cc) of kScoreRows keys against n_panels panels of
  // kScoreCols centroids. xt[d * kScoreRows + r] is element d of key r;
  // panels[(p * dim + d) * kScoreCols + c] is element d of centroid
  // p * kScoreCols + c. For r < kScoreRows, c < n_panels * kScoreCols:
  // s[r * lds + c] = sum_d key_r[d] * centroid_c[d] in F32, summation order
  // unspecified (the caller bounds the rounding error).
  void (*score_block)(const float* xt, const float* panels, int n_panels,
                      int dim, float* s, int64_t lds);
  // score_block for one narrow panel: panel[d * kScoreColsNarrow + c] is
  // element d of centroid c; for r < kScoreRows, c < kScoreColsNarrow:
  // s[r * lds + c] = sum_d key_r[d] * centroid_c[d] in F32, order
  // unspecified. Null: k-means uses score_block with padded panels.
  void (*score_block_narrow)(const float* xt, const float* panel, int dim,
                             float* s, int64_t lds);
  // Over s[0..n), n >= 1: *best = the maximum, *best_idx = its lowest index,
  // *second = the maximum over the other indices (-inf when n == 1).
  void (*top2)(const float* s, int n, float* best, int* best_idx,
               float* second);
  // Quest page bounds: mn[d] / mx[d] = min / max over rows j < n (n >= 1)
  // of element d (d < dim) of row j, at src + j * stride elements of type t
  // (kF32, kF16 or kBF16).
  void (*page_minmax)(DType t, const void* src, int64_t stride, int n, int dim,
                      float* mn, float* mx);
  // scores[p] = sum_d max(q[d] * mx[p * dim + d], q[d] * mn[p * dim + d])
  // for p < n_pages, in F32 and in one order -- the same bits in every
  // table, which the device planner's QuestPageScore
  // (kernels/device/selection_threads.h) reproduces: lane l < 16 sums the
  // terms of d = l, l + 16, ... in d order from +0 (each term the vector
  // max: q*mx when q*mx > q*mn, else q*mn), then the lanes fold in halves,
  // lane l + lane (l + 8), then + 4, + 2, + 1.
  void (*quest_scores)(const float* q, const float* mn, const float* mx,
                       int64_t n_pages, int dim, float* scores);
  // Cluster scores of n_q <= kCentroidQueries queries (qs: [n_q][dim])
  // against n centroids in F16 panels: panels[(p * dim + d) *
  // kCentroidPanel + c] is element d of centroid p * kCentroidPanel + c.
  // For j < n_q, c < n: s[j * lds + c] = the chain acc = fma(qs[j][d],
  // F16ToF32(centroid_c[d]), acc) over d = 0 .. dim - 1 from acc = 0 -- the
  // same bits in every table.
  void (*centroid_scores)(const float* qs, int n_q, const uint16_t* panels,
                          int64_t n, int dim, float* s, int64_t lds);

  // Block-type weights (IsQuantized(t)) times 8-bit activations (quant.h):
  // y[k * ldy + r] = sum_i W_r[i] * x_k[i] for r < n_rows, k < n_tok, with
  // x_k the dequantised acts[k] (acts[k].n == n_in, padded as QuantizeActs
  // pads). Null in tables without integer dot products: the driver then
  // uses gemv on F32 activations (the reference path of the scalar table).
  void (*quant_gemv)(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
                     int64_t n_in, const QuantizedActs* acts, int n_tok,
                     float* y, int64_t ldy);
  // QuantizeActs (quant.h) bit for bit, for quant_gemv's activations; null
  // where quant_gemv is.
  void (*quantize_acts)(const float* x, int64_t n, QuantizedActs* out,
                        ActForms forms);
  // True for the block types whose quant_gemv unpacks each weight block
  // once for several tokens: MatMul then multiplies many tokens by them on
  // quant_gemv too (8-bit activations, as decode does) instead of the F32 or
  // BF16 GEMM. Null: never.
  bool (*quant_gemv_batches)(DType t);

  // Attention scores from a row-major key tile (load_v's layout, ldk a
  // multiple of 16, zero past the row's elements and for rows n..kTileK):
  // s[i * kTileK + j] = sum_{d < ldk} q[i * ldq + d] * kr[j * ldk + d] for
  // i < rows, j < n (q rows zero-padded to ldk); s[i * kTileK + j] for
  // n <= j < kTileK is left unspecified (softmax_row masks it). Costs in
  // proportion to n, and is cheaper than load_kt + qk for few rows (decode:
  // no transpose). Null: the driver always uses load_kt + qk.
  void (*qk_rowmajor)(const float* q, int ldq, int rows, const float* kr,
                      int ldk, int n, float* s);

  // Decode forms (few rows) that read the stored K / V rows directly, with
  // no F32 tile: called only with hd % 8 == 0; rows of K / V as load_kt.
  // qk_direct: s[i * kTileK + j] = sum_{d < hd} q[i * ldq + d] * K_j[d] for
  // i < rows, j < n (s for j >= n unspecified). pv_direct: o[i * ldo + d] =
  // alpha[i] * o[i * ldo + d] + sum_{j < n} p[i * kTileK + j] * V_j[d] for
  // i < rows, d < hd. Null (both): the driver uses the tile forms.
  void (*qk_direct)(DType t, const void* k, int64_t stride, const int32_t* idx,
                    int n, int hd, const float* q, int ldq, int rows, float* s);
  void (*pv_direct)(DType t, const void* v, int64_t stride, const int32_t* idx,
                    int n, int hd, const float* p, int rows, const float* alpha,
                    float* o, int ldo);
};

const KernelSet& ScalarKernels();
// Null when the binary was built without support for that ISA. Call only
// when GetCpuFeatures() reports the ISA.
const KernelSet* Avx512Kernels();
// The AVX-512 table with the BF16 GEMM for prefill; needs AVX512_BF16 too.
const KernelSet* Avx512Bf16Kernels();
const KernelSet* Avx2Kernels();

// The table the fast ops use: the best one for this CPU unless overridden.
const KernelSet& ActiveKernels();
// Test hook: makes the fast ops use `ks` (nullptr: back to the detected
// table). Not thread-safe against concurrently running ops.
void SetKernelsForTesting(const KernelSet* ks);

}  // namespace ckv::kernels::cpu
