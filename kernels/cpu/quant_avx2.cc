// AVX2 quantised GEMV: FusedGemv (quant_dot_avx2.cc) for the types it
// handles; for the others, weight chunks unpacked to int8 (quant_unpack.inc)
// times 8-bit activations with vpmaddubsw on |w| and sign(w) * x (|w| <= 128,
// |x| <= 127: the pair sums stay below 2^15, no saturation).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx2q {
namespace {

using avx2util::Sum8;

#include "kernels/cpu/quant_unpack.inc"

constexpr int kTokTile = 4;

// acc += the chunk's contribution for one token (lanes summed later).
inline __m256 ChunkDot(const UnpackedChunk& u, const int8_t* xq,
                       const float* xd, const int32_t* xs, __m256 acc) {
  // Group g uses activation block g / 2.
  const __m256 dx = _mm256_loadu_ps(xd);
  const __m256 dx_lo =
      _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  const __m256 dx_hi =
      _mm256_permutevar8x32_ps(dx, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
  const __m256 sc[2] = {_mm256_mul_ps(_mm256_load_ps(u.scale), dx_lo),
                        _mm256_mul_ps(_mm256_load_ps(u.scale + 8), dx_hi)};
  const auto sums = [&](int h) {
    return _mm256_cvtepi32_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 8 * h)));
  };
  acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(u.bias), dx_lo), sums(0),
                        acc);
  acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(u.bias + 8), dx_hi),
                        sums(1), acc);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int v = 0; v < 8; ++v) {
    const __m256i w =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(u.w + 32 * v));
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * v));
    const __m256i p16 =
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    const __m256i p32 = _mm256_madd_epi16(p16, ones);
    // Lanes 0-3 cover group 2v, lanes 4-7 group 2v + 1.
    const int g = 2 * (v % 4);
    const __m256 ls = _mm256_permutevar8x32_ps(
        sc[v / 4], _mm256_setr_epi32(g, g, g, g, g + 1, g + 1, g + 1, g + 1));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), ls, acc);
  }
  return acc;
}

void RowTokens(DType t, const void* row, int64_t n_in, const QuantizedActs* a,
               int t0, int nt, float* y, int64_t ldy) {
  __m256 acc[kTokTile];
  for (int k = 0; k < nt; ++k) acc[k] = _mm256_setzero_ps();
  alignas(64) UnpackedChunk u;
  for (int64_t c = 0; c * kChunk < n_in; ++c) {
    UnpackChunk(t, row, n_in, c, &u);
    for (int k = 0; k < nt; ++k) {
      const QuantizedActs& x = a[t0 + k];
      acc[k] =
          ChunkDot(u, x.q.data() + c * kChunk, x.d.data() + c * (kChunk / 32),
                   x.sum16.data() + c * kChunkGroups, acc[k]);
    }
  }
  for (int k = 0; k < nt; ++k) y[(t0 + k) * ldy] = Sum8(acc[k]);
}

}  // namespace

void QuantGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  if (HasFusedDot(t, n_in)) {
    FusedGemv(t, w, row_bytes, n_rows, n_in, acts, n_tok, y, ldy);
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const void* row = static_cast<const char*>(w) + r * row_bytes;
    for (int t0 = 0; t0 < n_tok; t0 += kTokTile) {
      RowTokens(t, row, n_in, acts, t0, std::min(kTokTile, n_tok - t0), y + r,
                ldy);
    }
  }
}

void QuantToF32(DType t, const void* src, int64_t n, float* dst) {
  QuantRowToF32(t, src, n, dst);
}

}  // namespace ckv::kernels::cpu::avx2q
