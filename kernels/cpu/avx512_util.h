// Internal AVX-512 helpers shared by the kernels_avx512*.cc files, which are
// the only files compiled with -mavx512f -mavx512bw -mavx512vl -mf16c -mfma.
// Never include this from a file built without those flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu::avx512 {

inline __mmask16 TailMask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}

// 16 elements of a row of type T starting at element i, lanes outside `m`
// zero. T is kF32, kF16 or kBF16 (Q8_0 is handled by its callers).
template <DType T>
inline __m512 Load16(const void* row, int64_t i, __mmask16 m) {
  if constexpr (T == DType::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + i);
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(
        _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + i));
  } else {
    const __m256i h =
        _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Unmasked variant for full vectors.
template <DType T>
inline __m512 Load16(const void* row, int64_t i) {
  if constexpr (T == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + i);
  } else if constexpr (T == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
        static_cast<const uint16_t*>(row) + i)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
        static_cast<const uint16_t*>(row) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// 16 int8 quantised values -> F32 (unscaled).
inline __m512 LoadQ8x16(const int8_t* q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}

// exp(x) for all lanes; relative error ~2e-7; 0 for x < -104, inf-safe
// clamp at 88.7.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// In-place transpose of 16 vectors (rows) into 16 vectors (columns).
inline void Transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3
    const __m512 a = t[4 * g], b = t[4 * g + 1];
    const __m512 c = t[4 * g + 2], d = t[4 * g + 3];
    u[4 * g + 0] = _mm512_shuffle_ps(a, c, 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(a, c, 0xee);
    u[4 * g + 2] = _mm512_shuffle_ps(b, d, 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(b, d, 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[c + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

}  // namespace ckv::kernels::cpu::avx512
