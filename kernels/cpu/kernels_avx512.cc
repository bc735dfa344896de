// AVX-512 primitives for MatMul and elementwise ops (built with
// -mavx512f -mavx512bw -mavx512vl -mf16c -mfma; used only when
// GetCpuFeatures() reports them).
#include <cstring>

#include "kernels/cpu/avx512_util.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/kernels_avx2_attn.h"
#include "kernels/cpu/quant_kernels.h"

namespace ckv::kernels::cpu {
namespace avx512 {

// Attention primitives (kernels_avx512_attn.cc).
void LoadKt(DType t, const void* k, int64_t stride, const int32_t* rows, int n,
            int hd, float* kt);
void LoadV(DType t, const void* v, int64_t stride, const int32_t* rows, int n,
           int hd, int ldv, float* vt);
void Qk(const float* q, int ldq, int rows, const float* kt, int hd, float* s);
float SoftmaxRow(float* s, uint64_t valid, float* m, float* l);
void Pv(const float* p, int rows, const float* vt, int n, int ldv,
        const float* alpha, float* o);
// Clustered-KV primitives (kernels_avx512_cluster.cc).
void ScoreBlock(const float* xt, const float* panels, int n_panels, int dim,
                float* s, int64_t lds);
void Top2(const float* s, int n, float* best, int* best_idx, float* second);
void PageMinMax(DType t, const void* src, int64_t stride, int n, int dim,
                float* mn, float* mx);
void QuestScores(const float* q, const float* mn, const float* mx,
                 int64_t n_pages, int dim, float* scores);
void CentroidScores(const float* qs, int n_q, const uint16_t* panels, int64_t n,
                    int dim, float* s, int64_t lds);

namespace {

template <DType T>
void ToF32T(const void* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, Load16<T>(src, i));
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, Load16<T>(src, i, m));
  }
}

void ToF32Q8(const void* src, int64_t n, float* dst) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQ8_0BlockSize; ++i) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    _mm512_storeu_ps(dst + 32 * i, _mm512_mul_ps(d, LoadQ8x16(b[i].qs)));
    _mm512_storeu_ps(dst + 32 * i + 16,
                     _mm512_mul_ps(d, LoadQ8x16(b[i].qs + 16)));
  }
}

void ToF32(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      ToF32T<DType::kF16>(src, n, dst);
      return;
    case DType::kBF16:
      ToF32T<DType::kBF16>(src, n, dst);
      return;
    case DType::kQ8_0:
      ToF32Q8(src, n, dst);
      return;
    default:  // other block types
      if (GetCpuFeatures().avx512_vnni) {
        avx512q::QuantToF32(t, src, n, dst);
      } else {
        avx2q::QuantToF32(t, src, n, dst);
      }
      return;
  }
}

// R rows at once, two accumulators per row, sharing each load of x.
template <DType T, int R>
void GemvRowsN(const char* w, int64_t row_bytes, int64_t n_in, const float* x,
               float* y) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n_in; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + i);
    const __m512 x1 = _mm512_loadu_ps(x + i + 16);
    for (int r = 0; r < R; ++r) {
      const char* row = w + r * row_bytes;
      acc[r][0] = _mm512_fmadd_ps(Load16<T>(row, i), x0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(Load16<T>(row, i + 16), x1, acc[r][1]);
    }
  }
  for (; i < n_in; i += 16) {
    const __mmask16 m = TailMask(n_in - i);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < R; ++r) {
      acc[r][0] =
          _mm512_fmadd_ps(Load16<T>(w + r * row_bytes, i, m), xv, acc[r][0]);
    }
  }
  for (int r = 0; r < R; ++r) {
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
  }
}

// Rows of up to 4095 elements are read one
// after another (one sequential stream per thread): on a Zen 4 this reads a
// 128256 x 2048 F16 matrix at 2 threads in 16-22 ms, where four interleaved
// rows with a software prefetch of the next four took 43 ms (matvec_bench).
// Longer rows go four at a time : their x (>= 16 KB) does not
// stay in L1 beside the streamed weights, and one load of x serves four
// rows (2048 x 8192 F16, 2 threads: 0.88 ms vs 1.5 ms one row at a time).
constexpr int64_t kGemvWideRow = 4096;

template <DType T>
void GemvEachRow(const char* w, int64_t row_bytes, int64_t n_rows, int64_t n_in,
                 const float* x, float* y) {
  int64_t r = 0;
  if (n_in >= kGemvWideRow) {
    for (; r + 4 <= n_rows; r += 4) {
      GemvRowsN<T, 4>(w + r * row_bytes, row_bytes, n_in, x, y + r);
    }
  }
  for (; r < n_rows; ++r) {
    GemvRowsN<T, 1>(w + r * row_bytes, row_bytes, n_in, x, y + r);
  }
}

// Q8_0: per block, the dot of the int8 values with x is scaled by d.
template <int R>
void GemvRowsQ8(const char* w, int64_t row_bytes, int64_t n_in, const float* x,
                float* y) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < n_in / kQ8_0BlockSize; ++blk) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * blk);
    const __m512 x1 = _mm512_loadu_ps(x + 32 * blk + 16);
    for (int r = 0; r < R; ++r) {
      const BlockQ8_0& b =
          reinterpret_cast<const BlockQ8_0*>(w + r * row_bytes)[blk];
      __m512 s = _mm512_mul_ps(LoadQ8x16(b.qs), x0);
      s = _mm512_fmadd_ps(LoadQ8x16(b.qs + 16), x1, s);
      acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(_cvtsh_ss(b.d)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

void Gemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
          int64_t n_in, const float* x, float* y) {
  const char* base = static_cast<const char*>(w);
  switch (t) {
    case DType::kF32:
      return GemvEachRow<DType::kF32>(base, row_bytes, n_rows, n_in, x, y);
    case DType::kF16:
      return GemvEachRow<DType::kF16>(base, row_bytes, n_rows, n_in, x, y);
    case DType::kBF16:
      return GemvEachRow<DType::kBF16>(base, row_bytes, n_rows, n_in, x, y);
    case DType::kQ8_0: {
      int64_t r = 0;
      for (; r + 4 <= n_rows; r += 4) {
        GemvRowsQ8<4>(base + r * row_bytes, row_bytes, n_in, x, y + r);
      }
      for (; r < n_rows; ++r) {
        GemvRowsQ8<1>(base + r * row_bytes, row_bytes, n_in, x, y + r);
      }
      return;
    }
    default:  // other block types: the portable path
      return ScalarKernels().gemv(t, w, row_bytes, n_rows, n_in, x, y);
  }
}

void GemmTile(const float* const* a, const float* xt, int64_t k, float* y,
              int64_t ldy, int nr, int nc) {
  static_assert(kGemmRows == 8 && kGemmCols == 32);
  __m512 c[8][2];
  for (int r = 0; r < 8; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  const float* a6 = a[6];
  const float* a7 = a[7];
  for (int64_t kk = 0; kk < k; ++kk) {
    const __m512 x0 = _mm512_loadu_ps(xt + kk * 32);
    const __m512 x1 = _mm512_loadu_ps(xt + kk * 32 + 16);
    const float av[8] = {a0[kk], a1[kk], a2[kk], a3[kk],
                         a4[kk], a5[kk], a6[kk], a7[kk]};
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      const __m512 b = _mm512_set1_ps(av[r]);
      c[r][0] = _mm512_fmadd_ps(b, x0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(b, x1, c[r][1]);
    }
  }
  alignas(64) float tmp[8][32];
  for (int r = 0; r < 8; ++r) {
    _mm512_store_ps(tmp[r], c[r][0]);
    _mm512_store_ps(tmp[r] + 16, c[r][1]);
  }
  for (int j = 0; j < nc; ++j) {
    for (int r = 0; r < nr; ++r) y[j * ldy + r] = tmp[r][j];
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, u));
  }
}

}  // namespace
}  // namespace avx512

const KernelSet* Avx512Kernels() {
  static const KernelSet ks = {
      .name = "avx512",
      .to_f32 = avx512::ToF32,
      .gemv = avx512::Gemv,
      .gemm_tile = avx512::GemmTile,
      .pack_bf16_rows = nullptr,
      .pack_bf16_cols = nullptr,
      .gemm_bf16_tile = nullptr,
      .to_pairs_bf16 = nullptr,
      .pair_rows_bf16 = nullptr,
      .qk_bf16 = nullptr,
      .pv_bf16 = nullptr,
      .load_kt = avx512::LoadKt,
      .load_v = avx512::LoadV,
      .qk = avx512::Qk,
      .softmax_row = avx512::SoftmaxRow,
      .pv = avx512::Pv,
      .swiglu = avx512::SwiGlu,
      .score_block = avx512::ScoreBlock,
      .score_block_narrow = nullptr,  // not measured on AVX-512: wide panels
      .top2 = avx512::Top2,
      .page_minmax = avx512::PageMinMax,
      .quest_scores = avx512::QuestScores,
      .centroid_scores = avx512::CentroidScores,
      .quant_gemv =
          GetCpuFeatures().avx512_vnni ? avx512q::FusedGemv : avx2q::FusedGemv,
      .quantize_acts = avx2q::QuantizeActs,
      .quant_gemv_batches =
          GetCpuFeatures().avx512_vnni ? avx512q::BatchesTokens : nullptr,
      // The few-row (decode) forms are AVX2's, which every AVX-512 CPU
      // runs: on an AVX-512 VNNI Xeon they beat this table's 16-wide tile
      // forms for decode (kernels_bench sparse layer, 32 heads x 1,040
      // rows: 1.29 vs 2.29 ms; dense decode at 32k 18.4 vs 22.2 ms).
      .qk_rowmajor = avx2::QkRowMajor,
      .qk_direct = avx2::QkDirect,
      .pv_direct = avx2::PvDirect,
  };
  return &ks;
}

}  // namespace ckv::kernels::cpu
