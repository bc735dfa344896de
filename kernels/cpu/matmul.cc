// Fast MatMul driver. Few tokens: GEMV over blocks of weight rows that stay
// in L2 while every token uses them (memory-bound; rows split over threads).
// Many tokens: the BF16 GEMM where the table has one, else a blocked GEMM;
// activations are packed transposed into panels of kGemmCols tokens, weight
// rows are converted to F32 kGemmRows at a time and reused across a chunk of
// token panels that fits in L2.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu {
namespace {

// Bytes of weight rows per GEMV block, and of packed activations per GEMM
// chunk: both meant to stay in L2.
constexpr int64_t kL2Budget = 256 * 1024;

void Run(ThreadPool* pool, int64_t n, int64_t grain,
         const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

// The 8-bit activations of n_tokens tokens for quant_gemv with `wtype`
// weights (the one form it reads), spread over the pool when there are
// several.
const QuantizedActs* QuantizeTokens(ThreadPool* pool, const KernelSet& ks,
                                    DType wtype, int64_t n_in, const float* x,
                                    int64_t n_tokens) {
  static thread_local std::vector<QuantizedActs> acts;
  if (static_cast<int64_t>(acts.size()) < n_tokens) acts.resize(n_tokens);
  const ActForms forms =
      BlockSize(wtype) == kQK_K ? ActForms::kSuper : ActForms::kBlock;
  QuantizedActs* a = acts.data();
  const auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      ks.quantize_acts(x + t * n_in, n_in, &a[t], forms);
    }
  };
  if (n_tokens < kGemmMinTokens) {
    quantize(0, n_tokens);
  } else {
    Run(pool, n_tokens, 1, quantize);
  }
  return a;
}

// Many tokens by block-type weights on quant_gemv (quant_gemv_batches):
// tiles of kQuantTileRows weight rows by a chunk of tokens whose
// activations fit kL2Budget, so each row is unpacked once per token group
// from L1 and the chunk's activations stay in L2; tiles split over threads
// by row block.
constexpr int64_t kQuantTileRows = 64;
void QuantGemmPath(ThreadPool* pool, const KernelSet& ks, DType wtype,
                   const char* w, int64_t n_in, int64_t n_out, const float* x,
                   int64_t n_tokens, float* y) {
  const QuantizedActs* a = QuantizeTokens(pool, ks, wtype, n_in, x, n_tokens);
  const int64_t row_bytes = RowBytes(wtype, n_in);
  const int64_t chunk =
      std::max<int64_t>(4, std::min(n_tokens, kL2Budget / n_in) / 4 * 4);
  const int64_t blocks = (n_out + kQuantTileRows - 1) / kQuantTileRows;
  Run(pool, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
      const int nt = static_cast<int>(std::min(chunk, n_tokens - t0));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * kQuantTileRows;
        const int64_t nr = std::min(kQuantTileRows, n_out - r0);
        ks.quant_gemv(wtype, w + r0 * row_bytes, row_bytes, nr, n_in, a + t0,
                      nt, y + t0 * n_out + r0, n_out);
      }
    }
  });
}

// Block-type weights, few tokens: activations quantised to 8 bits once,
// then integer dot products over row ranges split across threads.
void QuantGemvPath(ThreadPool* pool, const KernelSet& ks, DType wtype,
                   const char* w, int64_t n_in, int64_t n_out, const float* x,
                   int64_t n_tokens, float* y) {
  const QuantizedActs* a = QuantizeTokens(pool, ks, wtype, n_in, x, n_tokens);
  const int64_t row_bytes = RowBytes(wtype, n_in);
  Run(pool, n_out, 16, [&](int64_t o0, int64_t o1) {
    ks.quant_gemv(wtype, w + o0 * row_bytes, row_bytes, o1 - o0, n_in, a,
                  static_cast<int>(n_tokens), y + o0, n_out);
  });
}

void GemvPath(ThreadPool* pool, const KernelSet& ks, DType wtype, const char* w,
              int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
              float* y) {
  if (IsQuantized(wtype) && ks.quant_gemv != nullptr &&
      ks.quantize_acts != nullptr) {
    QuantGemvPath(pool, ks, wtype, w, n_in, n_out, x, n_tokens, y);
    return;
  }
  const int64_t row_bytes = RowBytes(wtype, n_in);
  const int64_t block = std::max<int64_t>(16, kL2Budget / row_bytes / 4 * 4);
  Run(pool, n_out, 16, [&](int64_t o0, int64_t o1) {
    for (int64_t b = o0; b < o1; b += block) {
      const int64_t nb = std::min(block, o1 - b);
      for (int64_t t = 0; t < n_tokens; ++t) {
        ks.gemv(wtype, w + b * row_bytes, row_bytes, nb, n_in, x + t * n_in,
                y + t * n_out + b);
      }
    }
  });
}

// xt[p][k][c] = x[p * kGemmCols + c][k], zero for tokens >= n_tokens.
void PackTransposed(ThreadPool* pool, const float* x, int64_t n_in,
                    int64_t n_tokens, float* xt) {
  const int64_t panels = (n_tokens + kGemmCols - 1) / kGemmCols;
  Run(pool, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dst = xt + p * n_in * kGemmCols;
      for (int c = 0; c < kGemmCols; ++c) {
        const int64_t t = p * kGemmCols + c;
        if (t >= n_tokens) {
          for (int64_t k = 0; k < n_in; ++k) dst[k * kGemmCols + c] = 0.0f;
          continue;
        }
        const float* src = x + t * n_in;
        for (int64_t k = 0; k < n_in; ++k) dst[k * kGemmCols + c] = src[k];
      }
    }
  });
}

// Converts kGemmRows weight rows starting at `row0` to F32 (F32 weights are
// used in place); rows past n_out point at zeros.
void LoadRows(const KernelSet& ks, DType wtype, const char* w, int64_t n_in,
              int64_t n_out, int64_t row0, std::vector<float>& buf,
              const float** a) {
  const int64_t row_bytes = RowBytes(wtype, n_in);
  buf.resize((kGemmRows + 1) * n_in);
  float* zeros = buf.data() + kGemmRows * n_in;
  std::fill(zeros, zeros + n_in, 0.0f);
  for (int r = 0; r < kGemmRows; ++r) {
    const int64_t o = row0 + r;
    if (o >= n_out) {
      a[r] = zeros;
    } else if (wtype == DType::kF32) {
      a[r] = reinterpret_cast<const float*>(w + o * row_bytes);
    } else {
      ks.to_f32(wtype, w + o * row_bytes, n_in, buf.data() + r * n_in);
      a[r] = buf.data() + r * n_in;
    }
  }
}

void GemmPath(ThreadPool* pool, const KernelSet& ks, DType wtype, const char* w,
              int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens,
              float* y) {
  const int64_t panels = (n_tokens + kGemmCols - 1) / kGemmCols;
  static thread_local std::vector<float> xt;
  xt.resize(panels * n_in * kGemmCols);
  float* xt_data = xt.data();
  PackTransposed(pool, x, n_in, n_tokens, xt_data);
  const int64_t panel_floats = n_in * kGemmCols;
  const int64_t chunk = std::max<int64_t>(
      1, kL2Budget / (panel_floats * static_cast<int64_t>(sizeof(float))));
  const int64_t groups = (n_out + kGemmRows - 1) / kGemmRows;
  Run(pool, groups, 1, [&](int64_t g0, int64_t g1) {
    static thread_local std::vector<float> buf;
    const float* a[kGemmRows];
    for (int64_t p0 = 0; p0 < panels; p0 += chunk) {
      const int64_t p1 = std::min(panels, p0 + chunk);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t row0 = g * kGemmRows;
        LoadRows(ks, wtype, w, n_in, n_out, row0, buf, a);
        const int nr =
            static_cast<int>(std::min<int64_t>(kGemmRows, n_out - row0));
        for (int64_t p = p0; p < p1; ++p) {
          const int nc = static_cast<int>(
              std::min<int64_t>(kGemmCols, n_tokens - p * kGemmCols));
          ks.gemm_tile(a, xt_data + p * panel_floats, n_in,
                       y + p * kGemmCols * n_out + row0, n_out, nr, nc);
        }
      }
    }
  });
}

// The BF16 GEMM: activations packed once into panels of kBf16Cols tokens,
// each group of kBf16Rows weight rows converted (to F32, then BF16 pairs)
// once per call and run against every panel.
void GemmBf16Path(ThreadPool* pool, const KernelSet& ks, DType wtype,
                  const char* w, int64_t n_in, int64_t n_out, const float* x,
                  int64_t n_tokens, float* y) {
  const int64_t n_pairs = (n_in + 1) / 2;
  const int64_t panels = (n_tokens + kBf16Cols - 1) / kBf16Cols;
  const int64_t panel_words = n_pairs * kBf16Cols;
  static thread_local std::vector<uint32_t> xp;
  xp.resize(panels * panel_words);
  uint32_t* xp_data = xp.data();
  Run(pool, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int nc = static_cast<int>(
          std::min<int64_t>(kBf16Cols, n_tokens - p * kBf16Cols));
      ks.pack_bf16_cols(x + p * kBf16Cols * n_in, n_in, nc,
                        xp_data + p * panel_words);
    }
  });
  const int64_t row_bytes = RowBytes(wtype, n_in);
  const int64_t groups = (n_out + kBf16Rows - 1) / kBf16Rows;
  Run(pool, groups, 1, [&](int64_t g0, int64_t g1) {
    static thread_local std::vector<float> rows;
    static thread_local std::vector<uint32_t> wp;
    rows.resize((kBf16Rows + 1) * n_in);
    wp.resize(n_pairs * kBf16Rows);
    float* zeros = rows.data() + kBf16Rows * n_in;
    std::fill(zeros, zeros + n_in, 0.0f);
    const float* a[kBf16Rows];
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t row0 = g * kBf16Rows;
      const int nr =
          static_cast<int>(std::min<int64_t>(kBf16Rows, n_out - row0));
      for (int r = 0; r < kBf16Rows; ++r) {
        if (r >= nr) {
          a[r] = zeros;
        } else if (wtype == DType::kF32) {
          a[r] = reinterpret_cast<const float*>(w + (row0 + r) * row_bytes);
        } else {
          ks.to_f32(wtype, w + (row0 + r) * row_bytes, n_in,
                    rows.data() + r * n_in);
          a[r] = rows.data() + r * n_in;
        }
      }
      ks.pack_bf16_rows(a, n_in, wp.data());
      for (int64_t p = 0; p < panels; ++p) {
        const int nc = static_cast<int>(
            std::min<int64_t>(kBf16Cols, n_tokens - p * kBf16Cols));
        ks.gemm_bf16_tile(wp.data(), xp_data + p * panel_words, n_pairs,
                          y + p * kBf16Cols * n_out + row0, n_out, nr, nc);
      }
    }
  });
}

}  // namespace

const char* QuantDotPath(DType t) {
  const KernelSet& ks = ActiveKernels();
  if (!IsQuantized(t) || ks.quant_gemv == nullptr) return "f32 dot";
  // A row length that is a multiple of 256 suits every block type.
  // Both SIMD tables have a fused dot for every block type.
  const KernelSet* avx512 = Avx512Kernels();
  return avx512 != nullptr && ks.quant_gemv == avx512->quant_gemv &&
                 GetCpuFeatures().avx512_vnni
             ? "int8 dot, fused blocks (VNNI)"
             : "int8 dot, fused blocks";
}

void MatMul(ThreadPool* pool, DType wtype, const void* w, int64_t n_in,
            int64_t n_out, const float* x, int64_t n_tokens, float* y) {
  if (n_in <= 0 || n_out <= 0 || n_tokens <= 0) return;
  const KernelSet& ks = ActiveKernels();
  const char* wb = static_cast<const char*>(w);
  if (n_tokens < kGemmMinTokens) {
    GemvPath(pool, ks, wtype, wb, n_in, n_out, x, n_tokens, y);
  } else if (ks.quant_gemv_batches != nullptr && ks.quant_gemv_batches(wtype) &&
             ks.quantize_acts != nullptr) {
    QuantGemmPath(pool, ks, wtype, wb, n_in, n_out, x, n_tokens, y);
  } else if (ks.gemm_bf16_tile != nullptr) {
    GemmBf16Path(pool, ks, wtype, wb, n_in, n_out, x, n_tokens, y);
  } else {
    GemmPath(pool, ks, wtype, wb, n_in, n_out, x, n_tokens, y);
  }
}

}  // namespace ckv::kernels::cpu
