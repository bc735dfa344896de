// AVX-512 VNNI fused dot products of quantised weight rows with 8-bit
// activations (quant.h), straight from the packed blocks. vpdpbusd multiplies
// unsigned weight bytes by signed activation bytes and sums each 4 products
// into an int32 lane, so no product can saturate. Weights that are signed
// (q - offset) enter as the unsigned q; the offset's share, offset * (sum of
// the 4 activations of a lane), is the same for every row and is precomputed
// once per call as the accumulator's start value (LaneOffsets). Lane l of a
// dot over 64 elements covers elements 4l..4l+3; scales are applied per lane
// in F32. Q4_K, Q5_K and Q6_K instead keep a block's products in int32
// (vpmaddubsw, then vpdpwssd by the integer sub-block scale) and unpack each
// block once for kTokenGroup tokens (the int8 prefill, BatchesTokens). Used
// only on CPUs with AVX-512 F/BW/VL and VNNI.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx512q {
namespace {

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

#include "kernels/cpu/quant_dot_common.inc"

inline __m512i Load64(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
inline __m512i Concat(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Lane l of a dot over 64 elements (elements 4l..4l+3) belongs to group
// first + l / per of the vector's groups: index vectors for
// _mm512_permutexvar_ps over a table of per-group factors. kIdx8[p] serves
// groups of 32 (8 lanes; vector p covers groups 2p, 2p + 1), kIdx4[e] groups
// of 16 (4 lanes; vector e covers groups 4e .. 4e + 3).
struct GroupIndexTable {
  alignas(64) int32_t idx[4][16];
};
constexpr GroupIndexTable MakeGroupIndex(int per) {
  GroupIndexTable t{};
  for (int v = 0; v < 4; ++v)
    for (int l = 0; l < 16; ++l) t.idx[v][l] = (16 / per) * v + l / per;
  return t;
}
constexpr GroupIndexTable kIdx8 = MakeGroupIndex(8);
constexpr GroupIndexTable kIdx4 = MakeGroupIndex(4);
inline __m512i GroupIndex(const GroupIndexTable& t, int v) {
  return _mm512_load_si512(t.idx[v]);
}

// -offset * (sum of the 4 activations of lane l) for l < n / 4 (n a multiple
// of 64, the padded activations), the start value of a vpdpbusd whose
// unsigned weights are q = w + offset.
void LaneOffsets(const int8_t* x, int64_t n, int offset, int32_t* out) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i neg = _mm512_set1_epi32(-offset);
  for (int64_t i = 0; i < n; i += 64) {
    const __m512i s =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, Load64(x + i));
    _mm512_storeu_si512(out + i / 4, _mm512_mullo_epi32(s, neg));
  }
}

// The activations of one token as a fused dot reads them.
struct Acts {
  const int8_t* q;       // block or super-block form
  const float* d;        // its scales
  const int32_t* sum16;  // block form: sums per 16 (Q4_1/Q5_1's m term)
  const int16_t* s16;    // super-block form: sums per 16 (the mins)
  const int32_t* off;    // LaneOffsets of q for the row type's offset
};

// ---- 32-element blocks (block form: one activation scale per 32) ----

// The F16 field F of eight blocks as 8 F32 lanes.
template <typename Block, uint16_t Block::*F>
inline __m256 Halves8(const Block* w) {
  const __m128i h = _mm_setr_epi16(
      static_cast<int16_t>(w[0].*F), static_cast<int16_t>(w[1].*F),
      static_cast<int16_t>(w[2].*F), static_cast<int16_t>(w[3].*F),
      static_cast<int16_t>(w[4].*F), static_cast<int16_t>(w[5].*F),
      static_cast<int16_t>(w[6].*F), static_cast<int16_t>(w[7].*F));
  return _mm256_cvtph_ps(h);
}

// Two blocks' 16 bytes of nibbles as 64 bytes in element order: low nibbles
// of a (elements 0-15), high of a (16-31), then b's.
inline __m512i PairNibbles(const uint8_t* qa, const uint8_t* qb) {
  const __m256i ab = _mm256_inserti128_si256(
      _mm256_castsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(qa))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)), 1);
  const __m512i z = Concat(ab, _mm256_srli_epi16(ab, 4));  // a, b, a>>4, b>>4
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, 0xD8),
                          _mm512_set1_epi8(0x0F));
}

// Two blocks' 32 high bits (little-endian uint32 each, bit j for element j)
// as a byte mask in element order.
inline __mmask64 PairHighBits(const uint8_t* qha, const uint8_t* qhb) {
  uint32_t a, b;
  std::memcpy(&a, qha, 4);
  std::memcpy(&b, qhb, 4);
  return _cvtu64_mask64(a | static_cast<uint64_t>(b) << 32);
}

// The IQ4 code book plus 128 (unsigned) looked up for 64 4-bit indices.
inline __m512i Iq4Unsigned(__m512i idx) {
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)));
  return _mm512_xor_si512(_mm512_shuffle_epi8(table, idx),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}

// Unsigned weights q (w = q - offset, or x = d * q + m) of blocks w[0] and
// w[1] as 64 bytes.
inline __m512i PairQ8_0(const BlockQ8_0* w) {
  return _mm512_xor_si512(Concat(Load32(w[0].qs), Load32(w[1].qs)),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}
inline __m512i PairQ4_0(const BlockQ4_0* w) {
  return PairNibbles(w[0].qs, w[1].qs);
}
inline __m512i PairQ4_1(const BlockQ4_1* w) {
  return PairNibbles(w[0].qs, w[1].qs);
}
template <typename Block>
inline __m512i PairQ5(const Block* w) {
  const __m512i v = PairNibbles(w[0].qs, w[1].qs);
  return _mm512_mask_add_epi8(v, PairHighBits(w[0].qh, w[1].qh), v,
                              _mm512_set1_epi8(16));
}
inline __m512i PairIQ4NL(const BlockIQ4_NL* w) {
  return Iq4Unsigned(PairNibbles(w[0].qs, w[1].qs));
}

// Activation sums of blocks b .. b + 7 (from the sums per 16) as F32.
inline __m256 BlockSums8(const int32_t* sum16) {
  const __m256i pairs = _mm256_hadd_epi32(Load32(sum16), Load32(sum16 + 8));
  return _mm256_cvtepi32_ps(_mm256_permute4x64_epi64(pairs, 0xD8));
}

// 32-element types: sum over blocks of dw * dx * dot(q - offset, x), plus
// for the affine ones (Q4_1, Q5_1) m * dx * (sum of the block's x). In
// groups of 8 blocks; a short last group is copied into zero blocks (zero
// scale, zero weights) so that no load leaves the row.
template <typename Block, __m512i (*Pair)(const Block*), bool kAffine>
float DotBlocks32(const Block* w, int64_t nb, const Acts& a) {
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m256 acc_m = _mm256_setzero_ps();
  const auto group = [&](const Block* g, int64_t b, int n) {
    const __m256 dx = _mm256_loadu_ps(a.d + b);
    const __m512 scales =
        _mm512_castps256_ps512(_mm256_mul_ps(Halves8<Block, &Block::d>(g), dx));
    if constexpr (kAffine) {
      acc_m = _mm256_fmadd_ps(_mm256_mul_ps(Halves8<Block, &Block::m>(g), dx),
                              BlockSums8(a.sum16 + 2 * b), acc_m);
    }
    for (int p = 0; 2 * p < n; ++p) {
      const int64_t bp = b + 2 * p;
      const __m512i x = Load64(a.q + 32 * bp);
      const __m512i dp =
          a.off != nullptr
              ? _mm512_dpbusd_epi32(Load64(a.off + 8 * bp), Pair(g + 2 * p), x)
              : _mm512_dpbusd_epi32(_mm512_setzero_si512(), Pair(g + 2 * p), x);
      const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx8, p), scales);
      acc[p & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[p & 1]);
    }
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) group(w + b, b, 8);
  if (b < nb) {
    Block tail[8];
    std::memset(tail, 0, sizeof(tail));
    std::memcpy(tail, w + b, (nb - b) * sizeof(Block));
    group(tail, b, static_cast<int>(nb - b));
  }
  const __m512 sum = _mm512_add_ps(acc[0], acc[1]);
  return _mm512_reduce_add_ps(
      _mm512_add_ps(sum, _mm512_zextps256_ps512(acc_m)));
}

// ---- 256-element super-blocks (super-block form: one scale per 256) ----

// Q4_K / Q5_K activations in the order of the packed nibbles: in each
// 128 elements the second and third quarters swap, so that the low nibbles
// of qs[64j .. 64j + 63] (elements 128j + 0..31 and + 64..95) meet the first
// 64 activations and the high nibbles (+ 32..63, + 96..127) the next 64.
void NibbleOrder(const int8_t* x, int64_t n, int8_t* out) {
  for (int64_t i = 0; i < n; i += 128) {
    std::memcpy(out + i, x + i, 32);
    std::memcpy(out + i + 32, x + i + 64, 32);
    std::memcpy(out + i + 64, x + i + 32, 32);
    std::memcpy(out + i + 96, x + i + 96, 32);
  }
}

// Byte indices for _mm512_shuffle_epi8 over a 128-bit lane holding 8
// 16-bit values (a K-quant block's sub-block scales, or its mins) in every
// lane: kPairIndex.idx[2j + h] (h = 0 low, 1 high nibbles of qs[64j ..])
// repeats the scale of sub-block 4j + h in words 0-15 and of 4j + h + 2 in
// words 16-31, as vpmaddubsw pairs the 64 products; idx[4] repeats value
// g / 2 in word g < 16 (one min per 16 activations).
template <int kVectors>
struct WordShuffle {
  alignas(64) int8_t idx[kVectors][64];
};
// Shuffle vector v moves 16-bit value word(v, w) of a lane into word w.
template <int kVectors, typename WordOf>
constexpr WordShuffle<kVectors> MakeWordShuffle(WordOf word) {
  WordShuffle<kVectors> t{};
  for (int v = 0; v < kVectors; ++v) {
    for (int w = 0; w < 32; ++w) {
      t.idx[v][2 * w] = static_cast<int8_t>(2 * word(v, w));
      t.idx[v][2 * w + 1] = static_cast<int8_t>(2 * word(v, w) + 1);
    }
  }
  return t;
}
constexpr auto kPairIndex = MakeWordShuffle<5>([](int v, int w) {
  return v < 4 ? 4 * (v / 2) + v % 2 + 2 * (w / 16) : (w % 16) / 2;
});
inline __m512i PairIndex(int v) { return _mm512_load_si512(kPairIndex.idx[v]); }

// Q4_K / Q5_K: x = d * sc * q - dmin * mn over 8 sub-blocks of 32; a.q in
// NibbleOrder. Sub-block s's weights are the low (s even) or high (s odd)
// nibbles of qs[64 (s / 2) ..], bytes 0-31 for s % 4 < 2, else 32-63;
// Q5_K's bit 4 of sub-block s's element l is bit s of qh[l]. A block's
// products stay integers: vpmaddubsw pairs q (< 32) with the activations
// (|pair| <= 2 * 31 * 127, no saturation), vpdpwssd multiplies the pairs by
// the sub-block's 6-bit scale and sums them into int32 lanes (|lane| < 2^21
// over a block), converted to F32 once per block.
//
// kTok tokens at a time (a[0 .. kTok), out[t] = the dot with a[t]): each
// block's weights and scales are unpacked once for all of them.
template <typename Block, int kTok>
void DotQ45K(const Block* w, int64_t nb, const Acts* a, float* out) {
  constexpr bool kHighBit = std::is_same_v<Block, BlockQ5_K>;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[kTok];
  __m256 acc_min[kTok];
  for (int t = 0; t < kTok; ++t) {
    acc[t] = _mm512_setzero_ps();
    acc_min[t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const Block& k = w[b];
    uint64_t sc, mn;
    ScalesMinsK4(k.scales, &sc, &mn);
    const __m512i scales = _mm512_broadcast_i32x4(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
    const __m256i mins16 = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn))));
    __m512i qh;
    if constexpr (kHighBit) qh = _mm512_broadcast_i64x4(Load32(k.qh));
    __m512i sum[kTok];
    for (int t = 0; t < kTok; ++t) sum[t] = _mm512_setzero_si512();
    for (int j = 0; j < 2; ++j) {
      const __m512i z = Load64(k.qs + 64 * j);
      __m512i v[2] = {_mm512_and_si512(z, low4),
                      _mm512_and_si512(_mm512_srli_epi16(z, 4), low4)};
      for (int h = 0; h < 2; ++h) {
        if constexpr (kHighBit) {
          const int s = 4 * j + h;
          const __m512i bit =
              Concat(_mm256_set1_epi8(1 << s), _mm256_set1_epi8(1 << (s + 2)));
          v[h] = _mm512_mask_add_epi8(v[h], _mm512_test_epi8_mask(qh, bit),
                                      v[h], _mm512_set1_epi8(16));
        }
        const __m512i sv = _mm512_shuffle_epi8(scales, PairIndex(2 * j + h));
        const int64_t e = kQK_K * b + 128 * j + 64 * h;
        for (int t = 0; t < kTok; ++t) {
          const __m512i pairs = _mm512_maddubs_epi16(v[h], Load64(a[t].q + e));
          sum[t] = _mm512_dpwssd_epi32(sum[t], pairs, sv);
        }
      }
    }
    // mn[g / 2] * (activation sum of 16 g .. 16 g + 15), paired per min.
    const __m256i min_pairs =
        _mm256_shuffle_epi8(mins16, _mm512_castsi512_si256(PairIndex(4)));
    // d and dmin (adjacent F16 fields), times each token's dx.
    uint32_t d_dmin;
    std::memcpy(&d_dmin, &k.d, 4);
    const __m128 dw =
        _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int32_t>(d_dmin)));
    for (int t = 0; t < kTok; ++t) {
      const __m256i mins =
          _mm256_madd_epi16(Load32(a[t].s16 + 16 * b), min_pairs);
      const __m128 dd = _mm_mul_ps(dw, _mm_set1_ps(a[t].d[b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]),
                               _mm512_broadcastss_ps(dd), acc[t]);
      acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins),
                                   _mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
                                   acc_min[t]);
    }
  }
  for (int t = 0; t < kTok; ++t) {
    out[t] = _mm512_reduce_add_ps(
        _mm512_sub_ps(acc[t], _mm512_zextps256_ps512(acc_min[t])));
  }
}

// Byte indices for _mm512_shuffle_epi8 over a 128-bit lane holding 8
// 16-bit scales of groups of 16 in every lane: word w of a vpmaddubsw
// result (elements 2w, 2w + 1 of 64) takes scale kHalfIndex.idx[v] with
// v = 0 for groups 0-3 of the lane's 8, v = 1 for groups 4-7.
constexpr auto kHalfIndex =
    MakeWordShuffle<2>([](int v, int w) { return 4 * v + w / 8; });
inline __m512i HalfIndex(int v) { return _mm512_load_si512(kHalfIndex.idx[v]); }

// Q6_K: x = d * sc[g] * (q - 32) over 16 groups of 16, q < 64. For half h,
// ql[64h .. 64h + 63]'s low nibbles are elements 128h + 0..63 and its high
// nibbles 128h + 64..127; bits 4-5 of element 128h + 32s + l are bits 2s,
// 2s + 1 of qh[32h + l]. Integer per block: vpmaddubsw pairs q with the
// activations (|pair| <= 2 * 63 * 127), vpdpwssd weights the pairs by the
// signed group scale (|lane| < 2^24 over a block), and the -32 enters as
// 32 * sum_g sc[g] * (activation sum of group g).
template <int kTok>
void DotQ6K(const BlockQ6_K* w, int64_t nb, const Acts* a, float* out) {
  __m512 acc[kTok];
  for (int t = 0; t < kTok; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& k = w[b];
    const __m128i sc8 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.scales));
    const __m512i scales[2] = {
        _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(sc8)),
        _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)))};
    __m512i sum[kTok];
    for (int t = 0; t < kTok; ++t) sum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = Load64(k.ql + 64 * h);
      const __m256i qh = Load32(k.qh + 32 * h);
      const __m512i qh2 = Concat(qh, _mm256_srli_epi16(qh, 2));  // bits 0-1
      // (ql & 0x0F) | high bits; 0xEA is (A & B) | C.
      const __m512i v[2] = {
          _mm512_ternarylogic_epi32(
              ql, low4, _mm512_and_si512(_mm512_slli_epi16(qh2, 4), bits45),
              0xEA),
          _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), low4,
                                    _mm512_and_si512(qh2, bits45), 0xEA)};
      for (int i = 0; i < 2; ++i) {  // elements 64e .. 64e + 63, e = 2h + i
        const __m512i sv = _mm512_shuffle_epi8(scales[h], HalfIndex(i));
        const int64_t e = kQK_K * b + 128 * h + 64 * i;
        for (int t = 0; t < kTok; ++t) {
          const __m512i pairs = _mm512_maddubs_epi16(v[i], Load64(a[t].q + e));
          sum[t] = _mm512_dpwssd_epi32(sum[t], pairs, sv);
        }
      }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const float dw = Half(k.d);
    for (int t = 0; t < kTok; ++t) {
      const __m256i offset = _mm256_madd_epi16(Load32(a[t].s16 + 16 * b), sc16);
      const __m512i s = _mm512_sub_epi32(
          sum[t], _mm512_zextsi256_si512(_mm256_slli_epi32(offset, 5)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                               _mm512_set1_ps(dw * a[t].d[b]), acc[t]);
    }
  }
  for (int t = 0; t < kTok; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
}

// Q2_K: x = d * sc[g] * q - dmin * mn[g] over 16 groups of 16, q < 4, sc
// and mn the nibbles of scales[g]. Bits 2s, 2s + 1 of qs[32h + l] are
// element 128h + 32s + l.
float DotQ2K(const BlockQ2_K* w, int64_t nb, const Acts& a) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 acc_min = _mm512_setzero_ps();
  const __m256i three = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ2_K& k = w[b];
    const int8_t* x = a.q + kQK_K * b;
    const float dx = a.d[b];
    const __m512i sm = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.scales)));
    const __m512 scales = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_and_si512(sm, _mm512_set1_epi32(0xF))),
        _mm512_set1_ps(Half(k.d) * dx));
    const __m512 mins =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4)),
                      _mm512_set1_ps(Half(k.dmin) * dx));
    acc_min = _mm512_fmadd_ps(
        mins, _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(Load32(a.s16 + 16 * b))),
        acc_min);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(k.qs + 32 * h);
      const auto bits = [&](int s) {
        return _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), three);
      };
      const __m512i v[2] = {Concat(bits(0), bits(1)), Concat(bits(2), bits(3))};
      for (int i = 0; i < 2; ++i) {
        const int e = 2 * h + i;
        const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[i],
                                               Load64(x + 64 * e));
        const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx4, e), scales);
        acc[e] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[e]);
      }
    }
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),
                                   _mm512_add_ps(acc[2], acc[3]));
  return _mm512_reduce_add_ps(_mm512_sub_ps(sum, acc_min));
}

// Q3_K: x = d * (sc[g] - 32) * (u - 4), u = low 2 bits (as Q2_K) | the
// high bit << 2, u < 8; the high bit of element 128h + 32s + l is bit
// 4h + s of hmask[l]. The -4 comes in through LaneOffsets.
float DotQ3K(const BlockQ3_K* w, int64_t nb, const Acts& a) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m256i three = _mm256_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ3_K& k = w[b];
    const int8_t* x = a.q + kQK_K * b;
    const int32_t* off = a.off + (kQK_K / 4) * b;
    const __m512 scales = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ScalesQ3K(k.scales))),
        _mm512_set1_ps(Half(k.d) * a.d[b]));
    const __m512i hm = _mm512_broadcast_i64x4(Load32(k.hmask));
    for (int h = 0; h < 2; ++h) {
      const __m256i q = Load32(k.qs + 32 * h);
      const auto bits = [&](int s) {
        return _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), three);
      };
      for (int i = 0; i < 2; ++i) {
        const int e = 2 * h + i, s0 = 2 * i;  // runs s0, s0 + 1
        const __m512i low = Concat(bits(s0), bits(s0 + 1));
        const __m512i sel = Concat(_mm256_set1_epi8(1 << (4 * h + s0)),
                                   _mm256_set1_epi8(1 << (4 * h + s0 + 1)));
        const __m512i u = _mm512_mask_add_epi8(
            low, _mm512_test_epi8_mask(hm, sel), low, four);
        const __m512i dp =
            _mm512_dpbusd_epi32(Load64(off + 16 * e), u, Load64(x + 64 * e));
        const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx4, e), scales);
        acc[e] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[e]);
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),
                                            _mm512_add_ps(acc[2], acc[3])));
}

// IQ4_XS: sub-block j (< 8) of 32 is x = d * (ls_j - 32) * kIq4Values[q],
// its 16 bytes of nibbles at qs[16j] as IQ4_NL's; 6-bit ls_j = nibble j of
// scales_l (little-endian) | bits 2j, 2j + 1 of scales_h << 4. The code
// book's +128 comes out through LaneOffsets.
float DotIQ4XS(const BlockIQ4_XS* w, int64_t nb, const Acts& a) {
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m256i nib_shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i pair_shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockIQ4_XS& k = w[b];
    uint32_t sl;
    std::memcpy(&sl, k.scales_l, 4);
    const __m256i lo = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int32_t>(sl)),
                          nib_shift),
        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(k.scales_h), pair_shift),
        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(
        _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    const __m512 scales = _mm512_castps256_ps512(_mm256_mul_ps(
        _mm256_cvtepi32_ps(ls), _mm256_set1_ps(Half(k.d) * a.d[b])));
    const int8_t* x = a.q + kQK_K * b;
    const int32_t* off = a.off + (kQK_K / 4) * b;
    for (int p = 0; p < 4; ++p) {
      const __m512i u =
          Iq4Unsigned(PairNibbles(k.qs + 32 * p, k.qs + 32 * p + 16));
      const __m512i dp =
          _mm512_dpbusd_epi32(Load64(off + 16 * p), u, Load64(x + 64 * p));
      const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx8, p), scales);
      acc[p & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[p & 1]);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
}

// The offset whose LaneOffsets a type's dot starts from (0: none).
int WeightOffset(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
      return 128;
    case DType::kQ4_0:
      return 8;
    case DType::kQ5_0:
      return 16;
    case DType::kQ3_K:
      return 4;
    default:
      return 0;
  }
}

// Tokens per call of the dots that unpack a block once for several.
constexpr int kTokenGroup = 4;

struct RowsArgs {
  const void* w;
  int64_t row_bytes, n_rows, n_in;
  const Acts* acts;
  int n_tok;
  float* y;
  int64_t ldy;
};

// y[k * ldy + r] = Dot(row r, acts[k]) for r < n_rows, k < n_tok. Rows
// are read in order with no software prefetch (the AVX2 file prefetches a
// row ~1 KB ahead): on a Zen 4, 2 threads, matvec_bench 2048x8192 Q4_K
// 0.43-0.50 -> 0.31-0.33 ms and Q6_K 0.60-0.77 -> 0.37-0.49 ms without it,
// 128256x2048 Q4_K unchanged (4.7-4.9 ms).
template <typename Block, int kElems,
          float (*Dot)(const Block*, int64_t, const Acts&)>
void Rows(const RowsArgs& g) {
  const int64_t nb = g.n_in / kElems;
  const char* w = static_cast<const char*>(g.w);
  for (int64_t r = 0; r < g.n_rows; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w + r * g.row_bytes);
    for (int k = 0; k < g.n_tok; ++k)
      g.y[k * g.ldy + r] = Dot(row, nb, g.acts[k]);
  }
}

// As Rows, for dots that take several tokens per call (the weights of a
// block unpacked once for all of them): kTok tokens at a time, then a pair
// (two sessions decoding, or a decode token beside a one-token input part,
// server/input_budget.h), then one.
template <typename Block, int kTok,
          void (*DotN)(const Block*, int64_t, const Acts*, float*),
          void (*Dot2)(const Block*, int64_t, const Acts*, float*),
          void (*Dot1)(const Block*, int64_t, const Acts*, float*)>
void TokenRows(const RowsArgs& g) {
  const int64_t nb = g.n_in / kQK_K;
  const char* w = static_cast<const char*>(g.w);
  float out[kTok];
  for (int64_t r = 0; r < g.n_rows; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w + r * g.row_bytes);
    int k = 0;
    for (; k + kTok <= g.n_tok; k += kTok) {
      DotN(row, nb, g.acts + k, out);
      for (int t = 0; t < kTok; ++t) g.y[(k + t) * g.ldy + r] = out[t];
    }
    if (k + 2 <= g.n_tok) {
      Dot2(row, nb, g.acts + k, out);
      g.y[k * g.ldy + r] = out[0];
      g.y[(k + 1) * g.ldy + r] = out[1];
      k += 2;
    }
    if (k < g.n_tok) Dot1(row, nb, g.acts + k, g.y + k * g.ldy + r);
  }
}

}  // namespace

bool BatchesTokens(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

void FusedGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  const bool super = BlockSize(t) == kQK_K;
  const int offset = WeightOffset(t);
  // Activations padded to 64 (block form: to kChunk already).
  const int64_t lanes = (n_in + 63) / 64 * 16;
  const bool nibble_order = (t == DType::kQ4_K || t == DType::kQ5_K);
  thread_local std::vector<int32_t> offsets;
  thread_local std::vector<int8_t> reordered;
  thread_local std::vector<Acts> forms;
  offsets.resize(offset != 0 ? lanes * n_tok : 0);    // LaneOffsets fills it
  reordered.resize(nibble_order ? n_in * n_tok : 0);  // NibbleOrder fills it
  forms.resize(n_tok);
  for (int k = 0; k < n_tok; ++k) {
    const QuantizedActs& q = acts[k];
    Acts& f = forms[k];
    f.q = super ? q.qk.data() : q.q.data();
    f.d = super ? q.dk.data() : q.d.data();
    f.sum16 = super ? nullptr : q.sum16.data();
    f.s16 = super ? q.sumk16.data() : nullptr;
    f.off = nullptr;
    if (nibble_order) {
      int8_t* r = reordered.data() + k * n_in;
      NibbleOrder(f.q, n_in, r);
      f.q = r;
    }
    if (offset != 0) {
      int32_t* o = offsets.data() + k * lanes;
      LaneOffsets(f.q, lanes * 4, offset, o);
      f.off = o;
    }
  }
  const Acts* a = forms.data();
  const RowsArgs g{w, row_bytes, n_rows, n_in, a, n_tok, y, ldy};
  switch (t) {
    case DType::kQ8_0:
      return Rows<BlockQ8_0, 32, DotBlocks32<BlockQ8_0, PairQ8_0, false>>(g);
    case DType::kQ4_0:
      return Rows<BlockQ4_0, 32, DotBlocks32<BlockQ4_0, PairQ4_0, false>>(g);
    case DType::kQ4_1:
      return Rows<BlockQ4_1, 32, DotBlocks32<BlockQ4_1, PairQ4_1, true>>(g);
    case DType::kQ5_0:
      return Rows<BlockQ5_0, 32,
                  DotBlocks32<BlockQ5_0, PairQ5<BlockQ5_0>, false>>(g);
    case DType::kQ5_1:
      return Rows<BlockQ5_1, 32,
                  DotBlocks32<BlockQ5_1, PairQ5<BlockQ5_1>, true>>(g);
    case DType::kIQ4_NL:
      return Rows<BlockIQ4_NL, 32, DotBlocks32<BlockIQ4_NL, PairIQ4NL, false>>(
          g);
    case DType::kQ2_K:
      return Rows<BlockQ2_K, kQK_K, DotQ2K>(g);
    case DType::kQ3_K:
      return Rows<BlockQ3_K, kQK_K, DotQ3K>(g);
    case DType::kQ4_K:
      return TokenRows<BlockQ4_K, kTokenGroup, DotQ45K<BlockQ4_K, kTokenGroup>,
                       DotQ45K<BlockQ4_K, 2>, DotQ45K<BlockQ4_K, 1>>(g);
    case DType::kQ5_K:
      return TokenRows<BlockQ5_K, kTokenGroup, DotQ45K<BlockQ5_K, kTokenGroup>,
                       DotQ45K<BlockQ5_K, 2>, DotQ45K<BlockQ5_K, 1>>(g);
    case DType::kQ6_K:
      return TokenRows<BlockQ6_K, kTokenGroup, DotQ6K<kTokenGroup>, DotQ6K<2>,
                       DotQ6K<1>>(g);
    case DType::kIQ4_XS:
      return Rows<BlockIQ4_XS, kQK_K, DotIQ4XS>(g);
    default:
      return;
  }
}

}  // namespace ckv::kernels::cpu::avx512q
