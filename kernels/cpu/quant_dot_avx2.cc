// AVX2 fused dot products of one quantised weight row with 8-bit activations
// (quant.h), straight from the packed blocks: no unpacked copy of the row.
// The 32-element types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) use the block
// form of the activations (one scale per 32, the weights' block), the
// 256-element ones (K-quants, IQ4_XS) the super-block form (one scale per
// 256), so such a block is summed in int32 over all its sub-blocks and
// converted to float once. Products are formed with vpmaddubsw (unsigned x
// signed bytes, pairs summed to int16) and widened with vpmaddwd; the bounds
// that keep every int16 pair sum below 2^15 are stated at each use.
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

#include "kernels/cpu/quant_dot_common.inc"

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline int32_t SumI8(__m256i v) {
  __m128i s =
      _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Eight int32 sums of w[i] * x[i] over 32 signed bytes, |w| <= 128 and
// |x| <= 127: |w| times x with w's sign moved onto x, so each int16 pair sum
// is at most 2 * 128 * 127 < 2^15.
inline __m256i DotSigned32(__m256i w, __m256i x) {
  const __m256i p16 =
      _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// 16 bytes of nibbles as 32 bytes: low nibbles (elements 0-15), then high.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m),
                          _mm_and_si128(q, m));
}

// Blocks of 32. Symmetric types (Q8_0, Q4_0, Q5_0, IQ4_NL; Weights gives
// signed bytes, |w| <= 128): acc += dw * dx * (int dot of block b).
// Affine types (Q4_1, Q5_1, x = d * q + m; Weights gives unsigned q < 32,
// pairs 2 * 31 * 127 < 2^15): the same plus m * dx * (sum of the block's
// activations, from sum16). Two accumulators so that consecutive blocks do
// not wait on one FMA chain.
template <typename Block, __m256i (*Weights)(const Block&), bool kAffine>
float DotBlocks32(const Block* w, int64_t nb, const QuantizedActs& a) {
  const int8_t* xq = a.q.data();
  const float* xd = a.d.data();
  const int32_t* xs = a.sum16.data();
  float acc_min = 0.0f;
  const auto term = [&](int64_t b, __m256 acc) {
    const __m256i x = Load32(xq + 32 * b);
    __m256i p;
    if constexpr (kAffine) {
      p = _mm256_madd_epi16(_mm256_maddubs_epi16(Weights(w[b]), x),
                            _mm256_set1_epi16(1));
      acc_min +=
          Half(w[b].m) * xd[b] * static_cast<float>(xs[2 * b] + xs[2 * b + 1]);
    } else {
      p = DotSigned32(Weights(w[b]), x);
    }
    const __m256 s = _mm256_set1_ps(Half(w[b].d) * xd[b]);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc);
  };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    acc0 = term(b, acc0);
    acc1 = term(b + 1, acc1);
  }
  if (b < nb) acc0 = term(b, acc0);
  return Sum8(_mm256_add_ps(acc0, acc1)) + acc_min;
}

// Bit i of the 4 little-endian bytes at qh as byte i: 0xFF if set, else 0.
inline __m256i HighBits32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte i takes byte i / 8 of the word, then keeps bit i % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                         0x0303030303030303));
  const __m256i mask =
      _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

// The IQ4 code book in both 128-bit lanes (vpshufb looks up 16 entries).
inline __m256i Iq4Table() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
}

inline __m256i WeightsQ8_0(const BlockQ8_0& k) { return Load32(k.qs); }
inline __m256i WeightsQ4_0(const BlockQ4_0& k) {
  return _mm256_sub_epi8(Nibbles32(k.qs), _mm256_set1_epi8(8));
}
inline __m256i WeightsQ4_1(const BlockQ4_1& k) { return Nibbles32(k.qs); }
// q - 16 with q = nibble | (high bit << 4): the nibble where the high bit
// is set, else nibble - 16 (the nibble with bits 4-7 set).
inline __m256i WeightsQ5_0(const BlockQ5_0& k) {
  return _mm256_or_si256(
      Nibbles32(k.qs),
      _mm256_andnot_si256(HighBits32(k.qh),
                          _mm256_set1_epi8(static_cast<char>(0xF0))));
}
inline __m256i WeightsQ5_1(const BlockQ5_1& k) {
  return _mm256_or_si256(
      Nibbles32(k.qs),
      _mm256_and_si256(HighBits32(k.qh), _mm256_set1_epi8(0x10)));
}
// |kIq4Values| <= 127.
inline __m256i WeightsIQ4_NL(const BlockIQ4_NL& k) {
  return _mm256_shuffle_epi8(Iq4Table(), Nibbles32(k.qs));
}

// IQ4_XS: sub-block j (< 8) of 32 is x = d * (ls_j - 32) * kIq4Values[q]
// with 6-bit ls_j. |w| <= 127 gives int16 pairs below 2 * 127 * 127 < 2^15;
// vpmaddwd by ls_j - 32 (|.| <= 32) sums a block to at most
// 256 * 127 * 127 * 32 < 2^31 in magnitude.
float DotIQ4XS(const BlockIQ4_XS* w, int64_t nb, const QuantizedActs& a) {
  const __m256i table = Iq4Table();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const BlockIQ4_XS& k = w[b];
    const int8_t* x = a.qk.data() + kQK_K * b;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int ls = ((k.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) |
                     (((k.scales_h >> (2 * j)) & 3) << 4);
      const __m256i wv = _mm256_shuffle_epi8(table, Nibbles32(k.qs + 16 * j));
      const __m256i xv = Load32(x + 32 * j);
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv),
                                               _mm256_sign_epi8(xv, wv));
      sumi = _mm256_add_epi32(
          sumi, _mm256_madd_epi16(
                    p16, _mm256_set1_epi16(static_cast<int16_t>(ls - 32))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(k.d) * a.dk[b]),
                          _mm256_cvtepi32_ps(sumi), acc);
  }
  return Sum8(acc);
}

// All 16 int16 lanes = word j (< 8) of both 128-bit lanes of v.
inline __m256i WordBroadcast(__m256i v, int j) {
  return _mm256_shuffle_epi8(
      v, _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | 2 * j)));
}

// sum over sub-blocks j < 8 of mn[j] * (sum of the activations of
// sub-block j), from the 16 per-16 activation sums.
inline int32_t MinsDotSums(const uint8_t mn[8], const int16_t* sums16) {
  uint64_t m8;
  std::memcpy(&m8, mn, 8);
  const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m8));
  // Each min twice: lanes 2j, 2j + 1 pair with sums 2j, 2j + 1.
  const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16),
                                        _mm_unpacklo_epi16(m16, m16));
  return SumI8(_mm256_madd_epi16(mins, Load32(sums16)));
}

// Q4_K/Q5_K: x = d * sc * q - dmin * mn with q < 16 (Q4_K) or < 32 (Q5_K):
// q times activations pairs to at most 2 * 31 * 127 < 2^15; the int32 sum of
// a block stays below 8 * 32 * 63 * 31 * 127 < 2^31.
template <typename Block>
float DotQ45K(const Block* w, int64_t nb, const QuantizedActs& a) {
  constexpr bool kHighBit = std::is_same_v<Block, BlockQ5_K>;
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
  const int8_t* xq = a.qk.data();
  const int16_t* xs = a.sumk16.data();
  for (int64_t b = 0; b < nb; ++b) {
    const Block& k = w[b];
    const int8_t* x = xq + kQK_K * b;
    uint64_t sc8, mn8;
    ScalesMinsK4(k.scales, &sc8, &mn8);
    uint8_t mn[8];
    std::memcpy(mn, &mn8, 8);
    const float dx = a.dk[b];
    acc_min += Half(k.dmin) * dx * MinsDotSums(mn, xs + 16 * b);
    __m256i hv = _mm256_setzero_si256();
    if constexpr (kHighBit) hv = Load32(k.qh);
    const __m256i sc16 = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc8))));
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(k.qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kHighBit) {
        // Bits 2c (low nibbles) and 2c + 1 (high) of qh[l] become bit 4.
        const __m256i hs = _mm256_srli_epi16(hv, 2 * c);
        lo = _mm256_or_si256(lo,
                             _mm256_slli_epi16(_mm256_and_si256(hs, one), 4));
        hi = _mm256_or_si256(hi,
                             _mm256_slli_epi16(_mm256_and_si256(hs, two), 3));
      }
      const __m256i p_lo = _mm256_maddubs_epi16(lo, Load32(x + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, Load32(x + 64 * c + 32));
      sumi = _mm256_add_epi32(
          sumi, _mm256_madd_epi16(p_lo, WordBroadcast(sc16, 2 * c)));
      sumi = _mm256_add_epi32(
          sumi, _mm256_madd_epi16(p_hi, WordBroadcast(sc16, 2 * c + 1)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(k.d) * dx),
                          _mm256_cvtepi32_ps(sumi), acc);
  }
  return Sum8(acc) - acc_min;
}

// The 16 int8 scales of a block's 16-element sub-blocks as int16, with the
// 8 of half h (sub-blocks 8h..8h+7) in both 128-bit lanes.
struct HalfScales {
  __m256i half[2];
};
inline HalfScales LoadHalfScales(__m128i s8) {
  const __m256i s16 = _mm256_cvtepi8_epi16(s8);
  return {{_mm256_permute4x64_epi64(s16, 0x44),
           _mm256_permute4x64_epi64(s16, 0xEE)}};
}
inline HalfScales LoadHalfScales(const int8_t s[16]) {
  return LoadHalfScales(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
}

// Scales of sub-blocks 8h + 2j (lanes 0-7) and 8h + 2j + 1 (lanes 8-15):
// the factors of vpmaddwd on the products of a 32-element run whose halves
// belong to consecutive 16-element sub-blocks.
inline __m256i ScalePair(const HalfScales& hs, int h, int j) {
  const auto word = [](int i) {
    return _mm_set1_epi16(static_cast<int16_t>(((2 * i + 1) << 8) | 2 * i));
  };
  return _mm256_shuffle_epi8(hs.half[h],
                             _mm256_set_m128i(word(2 * j + 1), word(2 * j)));
}

// sum over the 16 sub-blocks of s[g] * (sum of the activations of g).
inline __m256i ScalesDotSums(const int8_t s[16], const int16_t* sums16) {
  const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  return _mm256_madd_epi16(_mm256_cvtepi8_epi16(s8), Load32(sums16));
}

// Q6_K: x = d * sc * (q - 32), q < 64 (pairs: 2 * 63 * 127 < 2^15),
// computed as sum_g sc[g] * (sum q * x - 32 * sum x) over groups of 16.
float DotQ6K(const BlockQ6_K* w, int64_t nb, const QuantizedActs& a) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i three = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& k = w[b];
    const int8_t* x = a.qk.data() + kQK_K * b;
    // 32 * sum_g sc[g] * sums[g], removed from the total below.
    const __m256i offs = ScalesDotSums(k.scales, a.sumk16.data() + 16 * b);
    const HalfScales scales = LoadHalfScales(k.scales);
    __m256i sumi =
        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offs, 5));
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = Load32(k.ql + 64 * h);
      const __m256i ql1 = Load32(k.ql + 64 * h + 32);
      const __m256i qh = Load32(k.qh + 32 * h);
      // Bits 2s, 2s + 1 of qh as bits 4-5.
      const auto high = [&](int s) {
        return _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), three), 4);
      };
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), high(0)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), high(1)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          high(2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          high(3)),
      };
      for (int s = 0; s < 4; ++s) {
        // Lanes 0-7 (elements 0-15 of the 32) use sub-block 8h + 2s, lanes
        // 8-15 the next.
        const __m256i p =
            _mm256_maddubs_epi16(q[s], Load32(x + 128 * h + 32 * s));
        sumi = _mm256_add_epi32(sumi,
                                _mm256_madd_epi16(p, ScalePair(scales, h, s)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(k.d) * a.dk[b]),
                          _mm256_cvtepi32_ps(sumi), acc);
  }
  return Sum8(acc);
}

// Q2_K: x = d * sc * q - dmin * mn, q < 4 (pairs: 2 * 3 * 127 < 2^15);
// sc, mn < 16 are the nibbles of scales[g]. Element order as in
// quant_blocks.h: for half h and shift 2j, the 32 values of qs[32h + l]
// cover sub-blocks 8h + 2j and 8h + 2j + 1.
float DotQ2K(const BlockQ2_K* w, int64_t nb, const QuantizedActs& a) {
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  const __m256i three = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K& k = w[b];
    const int8_t* x = a.qk.data() + kQK_K * b;
    int8_t sc[16], mn[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = static_cast<int8_t>(k.scales[g] & 0xF);
      mn[g] = static_cast<int8_t>(k.scales[g] >> 4);
    }
    const HalfScales scales = LoadHalfScales(sc);
    const float dx = a.dk[b];
    acc_min +=
        Half(k.dmin) * dx * SumI8(ScalesDotSums(mn, a.sumk16.data() + 16 * b));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = Load32(k.qs + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), three);
        const __m256i p = _mm256_maddubs_epi16(q, Load32(x + 128 * h + 32 * j));
        sumi = _mm256_add_epi32(sumi,
                                _mm256_madd_epi16(p, ScalePair(scales, h, j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(k.d) * dx),
                          _mm256_cvtepi32_ps(sumi), acc);
  }
  return Sum8(acc) - acc_min;
}

// Q3_K: x = d * (sc - 32) * v, v = low 2 bits - 4 * (high bit clear), taken
// as u = v + 4 in [0, 8) (pairs: 2 * 7 * 127 < 2^15) minus 4 * sum x per
// sub-block. Element order as Q2_K; the high bit of element l < 32 of the
// run (h, j) is bit 4h + j of hmask[l].
float DotQ3K(const BlockQ3_K* w, int64_t nb, const QuantizedActs& a) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ3_K& k = w[b];
    const int8_t* x = a.qk.data() + kQK_K * b;
    const __m128i sc8 = ScalesQ3K(k.scales);
    const HalfScales scales = LoadHalfScales(sc8);
    // 4 * sum_g sc[g] * sums[g], removed from the total.
    const __m256i offs = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                           Load32(a.sumk16.data() + 16 * b));
    __m256i sumi =
        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offs, 2));
    const __m256i hm = Load32(k.hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = Load32(k.qs + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i lo =
            _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), three);
        const __m256i hb =
            _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
        const __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
        const __m256i p = _mm256_maddubs_epi16(u, Load32(x + 128 * h + 32 * j));
        sumi = _mm256_add_epi32(sumi,
                                _mm256_madd_epi16(p, ScalePair(scales, h, j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(Half(k.d) * a.dk[b]),
                          _mm256_cvtepi32_ps(sumi), acc);
  }
  return Sum8(acc);
}

struct GemvArgs {
  const void* w;
  int64_t row_bytes, n_rows, n_in;
  const QuantizedActs* acts;
  int n_tok;
  float* y;
  int64_t ldy;
};

// y[k * ldy + r] = Dot(row r, acts[k]) for r < n_rows, k < n_tok.
template <typename Block, int kElems,
          float (*Dot)(const Block*, int64_t, const QuantizedActs&)>
void Rows(const GemvArgs& g) {
  const int64_t nb = g.n_in / kElems;
  const char* w = static_cast<const char*>(g.w);
  const int64_t rows_ahead = RowsAhead(g.row_bytes);
  for (int64_t r = 0; r < g.n_rows; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w + r * g.row_bytes);
    PrefetchRow(w + (r + rows_ahead) * g.row_bytes, g.row_bytes);
    for (int k = 0; k < g.n_tok; ++k) {
      g.y[k * g.ldy + r] = Dot(row, nb, g.acts[k]);
    }
  }
}

}  // namespace

void FusedGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  const GemvArgs g{w, row_bytes, n_rows, n_in, acts, n_tok, y, ldy};
  switch (t) {
    case DType::kQ8_0:
      return Rows<BlockQ8_0, 32, DotBlocks32<BlockQ8_0, WeightsQ8_0, false>>(g);
    case DType::kQ4_0:
      return Rows<BlockQ4_0, 32, DotBlocks32<BlockQ4_0, WeightsQ4_0, false>>(g);
    case DType::kQ4_1:
      return Rows<BlockQ4_1, 32, DotBlocks32<BlockQ4_1, WeightsQ4_1, true>>(g);
    case DType::kQ5_0:
      return Rows<BlockQ5_0, 32, DotBlocks32<BlockQ5_0, WeightsQ5_0, false>>(g);
    case DType::kQ5_1:
      return Rows<BlockQ5_1, 32, DotBlocks32<BlockQ5_1, WeightsQ5_1, true>>(g);
    case DType::kIQ4_NL:
      return Rows<BlockIQ4_NL, 32,
                  DotBlocks32<BlockIQ4_NL, WeightsIQ4_NL, false>>(g);
    case DType::kIQ4_XS:
      return Rows<BlockIQ4_XS, kQK_K, DotIQ4XS>(g);
    case DType::kQ2_K:
      return Rows<BlockQ2_K, kQK_K, DotQ2K>(g);
    case DType::kQ3_K:
      return Rows<BlockQ3_K, kQK_K, DotQ3K>(g);
    case DType::kQ4_K:
      return Rows<BlockQ4_K, kQK_K, DotQ45K<BlockQ4_K>>(g);
    case DType::kQ5_K:
      return Rows<BlockQ5_K, kQK_K, DotQ45K<BlockQ5_K>>(g);
    case DType::kQ6_K:
      return Rows<BlockQ6_K, kQK_K, DotQ6K>(g);
    default:
      return;
  }
}

}  // namespace ckv::kernels::cpu::avx2q
