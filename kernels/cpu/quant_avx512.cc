// AVX-512 VNNI quantised GEMV: the fused dots (quant_dot_avx512.cc, else
// quant_dot_avx2.cc) where a type has one; otherwise weight chunks unpacked
// to int8 (quant_unpack.inc) times 8-bit activations with vpdpbusd. The
// unsigned operand is the weight plus 128; the extra 128 * sum(x) is removed
// through the group's bias term. Compiled with -mavx512vnni; used only when the
// CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx512q {
namespace {

#include "kernels/cpu/quant_unpack.inc"

// Tokens whose accumulators are kept in registers at once.
constexpr int kTokTile = 4;

// Per-group factors of one chunk against one token's activations.
struct GroupFactors {
  __m512 scale;  // scale[g] * dx[g / 2]
  __m512 bias;   // (bias[g] - 128 * scale[g]) * dx[g / 2]
};

inline GroupFactors Factors(const UnpackedChunk& u, const float* xd) {
  const __m512i half_idx =
      _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const __m512 dx = _mm512_permutexvar_ps(
      half_idx, _mm512_castps256_ps512(_mm256_loadu_ps(xd)));
  const __m512 sc = _mm512_load_ps(u.scale);
  const __m512 b =
      _mm512_fmadd_ps(_mm512_set1_ps(-128.0f), sc, _mm512_load_ps(u.bias));
  return {_mm512_mul_ps(sc, dx), _mm512_mul_ps(b, dx)};
}

// acc += the chunk's contribution for one token (lanes summed later).
inline __m512 ChunkDot(const __m512i* w_u8, const GroupFactors& f,
                       const int8_t* xq, const int32_t* xs, __m512 acc) {
  acc =
      _mm512_fmadd_ps(f.bias, _mm512_cvtepi32_ps(_mm512_loadu_si512(xs)), acc);
  for (int v = 0; v < 4; ++v) {
    const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_u8[v],
                                           _mm512_loadu_si512(xq + 64 * v));
    // Lane l of vector v covers group 4v + l / 4.
    const __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(4 * v),
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp),
                          _mm512_permutexvar_ps(idx, f.scale), acc);
  }
  return acc;
}

// One weight row against tokens [t0, t0 + nt), nt <= kTokTile.
void RowTokens(DType t, const void* row, int64_t n_in, const QuantizedActs* a,
               int t0, int nt, float* y, int64_t ldy) {
  __m512 acc[kTokTile];
  for (int k = 0; k < nt; ++k) acc[k] = _mm512_setzero_ps();
  UnpackedChunk u;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t c = 0; c * kChunk < n_in; ++c) {
    UnpackChunk(t, row, n_in, c, &u);
    __m512i w_u8[4];
    for (int v = 0; v < 4; ++v) {
      w_u8[v] = _mm512_xor_si512(_mm512_load_si512(u.w + 64 * v), flip);
    }
    for (int k = 0; k < nt; ++k) {
      const QuantizedActs& x = a[t0 + k];
      const GroupFactors f = Factors(u, x.d.data() + c * (kChunk / 32));
      acc[k] = ChunkDot(w_u8, f, x.q.data() + c * kChunk,
                        x.sum16.data() + c * kChunkGroups, acc[k]);
    }
  }
  for (int k = 0; k < nt; ++k) {
    y[(t0 + k) * ldy] = _mm512_reduce_add_ps(acc[k]);
  }
}

}  // namespace

void QuantGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  if (HasFusedDot(t, n_in)) {
    FusedGemv(t, w, row_bytes, n_rows, n_in, acts, n_tok, y, ldy);
    return;
  }
  if (avx2q::HasFusedDot(t, n_in)) {
    avx2q::FusedGemv(t, w, row_bytes, n_rows, n_in, acts, n_tok, y, ldy);
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

}  // namespace ckv::kernels::cpu::avx512q
