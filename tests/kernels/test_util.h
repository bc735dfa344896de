// Shared helpers of the kernel tests: random data, weight encoding in every
// dtype, and the list of kernel tables available on this CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"

namespace ckv::kernels::cpu::testing {

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Encodes n_rows rows of n F32 values into dtype t (bytes, row-major).
inline std::vector<uint8_t> Encode(DType t, const std::vector<float>& src,
                                   int64_t n_rows, int64_t n) {
  const int64_t rb = RowBytes(t, n);
  std::vector<uint8_t> out(n_rows * rb);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* s = src.data() + r * n;
    uint8_t* d = out.data() + r * rb;
    if (t == DType::kF32) {
      std::memcpy(d, s, n * 4);
    } else if (t == DType::kF16 || t == DType::kBF16) {
      auto* h = reinterpret_cast<uint16_t*>(d);
      for (int64_t i = 0; i < n; ++i) {
        h[i] = t == DType::kF16 ? F32ToF16(s[i]) : F32ToBF16(s[i]);
      }
    } else if (t != DType::kQ8_0) {
      QuantizeRow(t, s, n, d);
    } else {
      auto* b = reinterpret_cast<BlockQ8_0*>(d);
      for (int64_t k = 0; k < n / kQ8_0BlockSize; ++k) {
        float amax = 0.0f;
        for (int j = 0; j < kQ8_0BlockSize; ++j) {
          amax = std::max(amax, std::fabs(s[k * kQ8_0BlockSize + j]));
        }
        const float dq = amax / 127.0f;
        b[k].d = F32ToF16(dq);
        const float inv = dq > 0.0f ? 1.0f / dq : 0.0f;
        for (int j = 0; j < kQ8_0BlockSize; ++j) {
          b[k].qs[j] =
              static_cast<int8_t>(std::lround(s[k * kQ8_0BlockSize + j] * inv));
        }
      }
    }
  }
  return out;
}

// Upper bound of |sum_i w_i x_i - sum_i w_i x'_i| when x' is x quantised to
// 8 bits per block of `block` elements (QuantizeActs: |x - x'| <= max|x_block|
// / 254; block 32 for the block form, 256 for the super-block form). The
// bound for 256 also holds for the block form (a block's max is at most its
// super-block's).
inline double ActQuantBound(const float* w, const float* x, int64_t n,
                            int64_t block = 32) {
  double bound = 0.0;
  for (int64_t b = 0; b < n / block; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < block; ++j)
      amax = std::max(amax, std::fabs(x[block * b + j]));
    for (int64_t j = 0; j < block; ++j)
      bound += std::fabs(w[block * b + j]) * amax / 254.0;
  }
  return bound;
}

// The kernel tables this CPU can run: scalar always, AVX2 and AVX-512 if
// present.
inline std::vector<const KernelSet*> AvailableKernelSets() {
  std::vector<const KernelSet*> out = {&ScalarKernels()};
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx2 && f.fma && f.f16c && Avx2Kernels() != nullptr) {
    out.push_back(Avx2Kernels());
  }
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.f16c &&
      Avx512Kernels() != nullptr) {
    out.push_back(Avx512Kernels());
    if (f.avx512_bf16 && Avx512Bf16Kernels() != nullptr) {
      out.push_back(Avx512Bf16Kernels());
    }
  }
  return out;
}

// The bound of attention outputs (weighted means of values in [-1, 1])
// against ref::Attention: 3e-5, except where the active table's BF16 tiles
// can serve the call (avx512_bf16, items of more than 8 rows: any n_q > 1).
// They round the scaled queries, keys, probabilities and values to BF16
// (2^-9 each): measured 2026-12-06 (Zen 4) up to 2.6e-3 (sliding window with
// soft-capping; 0.6e-3 to 1.95e-3 elsewhere). Stated bound 4e-3 until
// 2026-12-07, when the op suite's second pass of
// AttentionGqaSoftcapWindowTwoSequences (its streamed variant: new random
// inputs, the CPU backend's math unchanged) gave 4.65e-3 on the
// avx512_bf16 table (head_dim 67, no softcap or window, the 4-query part,
// row 2: 0.17652 against 0.18117). The error is the BF16 rounding of q and
// k amplified by the softmax (scores up to ~16 at head_dim 67); stated
// bound now 6e-3.
inline constexpr double kBf16AttentionTolerance = 6e-3;
inline double AttentionTolerance(int n_q) {
  return ActiveKernels().qk_bf16 != nullptr && n_q > 1 ? kBf16AttentionTolerance
                                                       : 3e-5;
}

// Forces a kernel table for the lifetime of the object.
class ScopedKernels {
 public:
  explicit ScopedKernels(const KernelSet* ks) { SetKernelsForTesting(ks); }
  ~ScopedKernels() { SetKernelsForTesting(nullptr); }
};

}  // namespace ckv::kernels::cpu::testing
