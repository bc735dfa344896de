// Internal AVX2 helpers shared by the files compiled with -mavx2 -mfma
// -mf16c (kernels_avx2*.cc, quant_avx2.cc, quant_dot_avx2.cc). Never include
// this from a file built without those flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu::avx2util {

// 8 elements of a row of type T (kF32, kF16 or kBF16) from element i.
template <DType T>
inline __m256 Load8(const void* row, int64_t i) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
        static_cast<const uint16_t*>(row) + i));
    if constexpr (T == DType::kF16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

// Element i of a row of type T, as Load8.
template <DType T>
inline float Element(const void* row, int64_t i) {
  if constexpr (T == DType::kF32) {
    return static_cast<const float*>(row)[i];
  } else if constexpr (T == DType::kF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(row)[i]);
  } else {
    return BF16ToF32(static_cast<const uint16_t*>(row)[i]);
  }
}

// The sum of the 8 lanes.
inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace ckv::kernels::cpu::avx2util
