// AVX-512 VNNI fused dot products of quantised weight rows with 8-bit
// activations (quant.h), straight from the packed blocks. vpdpbusd multiplies
// unsigned weight bytes by signed activation bytes and sums each 4 products
// into an int32 lane, so no product can saturate. Weights that are signed
// (q - offset) enter as the unsigned q; the offset's share, offset * (sum of
// the 4 activations of a lane), is the same for every row and is precomputed
// once per call as the accumulator's start value (LaneOffsets). Lane l of a
// dot over 64 elements covers elements 4l..4l+3; scales are applied per lane
// in F32. Used only on CPUs with AVX-512 F/BW/VL and VNNI.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx512q {
namespace {

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

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
  const int8_t* q;     // block or super-block form
  const float* d;      // its scales
  const int16_t* s16;  // super-block form: sums per 16 (mins of Q4_K/Q5_K)
  const int32_t* off;  // LaneOffsets of q for the row type's offset
};

// ---- 32-element blocks (block form: one activation scale per 32) ----

// Eight blocks' scales times the activation scales: lanes 0-7 as F32.
template <typename Block>
inline __m256 BlockScales8(const Block* w, const float* xd) {
  const __m128i h = _mm_setr_epi16(
      static_cast<int16_t>(w[0].d), static_cast<int16_t>(w[1].d),
      static_cast<int16_t>(w[2].d), static_cast<int16_t>(w[3].d),
      static_cast<int16_t>(w[4].d), static_cast<int16_t>(w[5].d),
      static_cast<int16_t>(w[6].d), static_cast<int16_t>(w[7].d));
  return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(xd));
}

// Unsigned weights (q = w + offset) of blocks b and b + 1 as 64 bytes.
inline __m512i PairQ8_0(const BlockQ8_0* w) {
  return _mm512_xor_si512(Concat(Load32(w[0].qs), Load32(w[1].qs)),
                          _mm512_set1_epi8(static_cast<char>(0x80)));
}
inline __m512i PairQ4_0(const BlockQ4_0* w) {
  // [lo(a), hi(a), lo(b), hi(b)] in 128-bit quarters.
  const __m256i ab = _mm256_inserti128_si256(
      _mm256_castsi128_si256(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[0].qs))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[1].qs)), 1);
  const __m512i z = Concat(ab, _mm256_srli_epi16(ab, 4));  // a, b, a>>4, b>>4
  return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, 0xD8),
                          _mm512_set1_epi8(0x0F));
}

// Symmetric 32-element types: sum over blocks of dw * dx * dot(w, x), in
// groups of 8 blocks (tail blocks get a zero scale and zero weights).
template <typename Block, __m512i (*Pair)(const Block*)>
float DotBlocks32(const Block* w, int64_t nb, const Acts& a) {
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const auto pair_term = [&](const Block* wp, int64_t b, __m512 scales, int p) {
    const __m512i q = Pair(wp);
    const __m512i dp =
        _mm512_dpbusd_epi32(Load64(a.off + 8 * b), q, Load64(a.q + 32 * b));
    const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx8, p), scales);
    acc[p & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[p & 1]);
  };
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m512 scales = _mm512_castps256_ps512(BlockScales8(w + b, a.d + b));
    for (int p = 0; p < 4; ++p) pair_term(w + b + 2 * p, b + 2 * p, scales, p);
  }
  if (b < nb) {
    // Copy the tail into a zero-padded group so that no load leaves the row.
    Block tail[8];
    std::memset(tail, 0, sizeof(tail));
    std::memcpy(tail, w + b, (nb - b) * sizeof(Block));
    const __m512 scales = _mm512_castps256_ps512(BlockScales8(tail, a.d + b));
    for (int p = 0; 2 * p < nb - b; ++p)
      pair_term(tail + 2 * p, b + 2 * p, scales, p);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
}

// ---- 256-element super-blocks (super-block form: one scale per 256) ----

// The 8 scales and 8 mins (6 bits each) of a Q4_K/Q5_K block; see
// quant_dot_avx2.cc for the packing.
inline void ScalesMinsK4(const uint8_t* p, uint64_t* sc, uint64_t* mn) {
  uint32_t a, b, c;
  std::memcpy(&a, p, 4);
  std::memcpy(&b, p + 4, 4);
  std::memcpy(&c, p + 8, 4);
  const uint32_t s_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t s_hi = (c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi =
      ((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4);
  *sc = s_lo | static_cast<uint64_t>(s_hi) << 32;
  *mn = m_lo | static_cast<uint64_t>(m_hi) << 32;
}

// 8 unsigned bytes as 8 F32 lanes times f.
inline __m256 BytesTimes(uint64_t bytes, float f) {
  const __m256i v =
      _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(f));
}

// Q4_K / Q5_K: x = d * sc * q - dmin * mn over 8 sub-blocks of 32. The
// weights of elements 128j .. 128j + 127 come from qs[64j .. 64j + 63]: the
// low nibbles are elements +0..31 and +64..95, the high ones +32..63 and
// +96..127; Q5_K's bit 4 of element 64c + l (+ 32) is bit 2c (2c + 1) of
// qh[l].
template <typename Block>
float DotQ45K(const Block* w, int64_t nb, const Acts& a) {
  constexpr bool kHighBit = std::is_same_v<Block, BlockQ5_K>;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m256 acc_min = _mm256_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const Block& k = w[b];
    const int8_t* x = a.q + kQK_K * b;
    const float dx = a.d[b];
    uint64_t sc, mn;
    ScalesMinsK4(k.scales, &sc, &mn);
    const __m512 scales =
        _mm512_castps256_ps512(BytesTimes(sc, Half(k.d) * dx));
    // dmin * dx * sum_j mn[j] * (activation sum of sub-block j).
    const __m256i sums = _mm256_madd_epi16(
        Load32(a.s16 + 16 * b), _mm256_set1_epi16(1));  // sub-block sums
    acc_min = _mm256_fmadd_ps(BytesTimes(mn, Half(k.dmin) * dx),
                              _mm256_cvtepi32_ps(sums), acc_min);
    __m512i qh;
    if constexpr (kHighBit) qh = _mm512_broadcast_i64x4(Load32(k.qh));
    for (int j = 0; j < 2; ++j) {
      const __m512i z = Load64(k.qs + 64 * j);
      const __m512i lo = _mm512_and_si512(z, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), low4);
      __m512i v[2] = {_mm512_shuffle_i64x2(lo, hi, 0x44),
                      _mm512_shuffle_i64x2(lo, hi, 0xEE)};
      for (int h = 0; h < 2; ++h) {
        const int c = 2 * j + h;
        if constexpr (kHighBit) {
          const __m512i bit = Concat(_mm256_set1_epi8(1 << (2 * c)),
                                     _mm256_set1_epi8(1 << (2 * c + 1)));
          v[h] = _mm512_mask_add_epi8(v[h], _mm512_test_epi8_mask(qh, bit),
                                      v[h], _mm512_set1_epi8(16));
        }
        const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[h],
                                               Load64(x + 64 * c));
        const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx8, c), scales);
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[c]);
      }
    }
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),
                                   _mm512_add_ps(acc[2], acc[3]));
  const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(acc_min),
                               _mm256_extractf128_ps(acc_min, 1));
  const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
  const float mins = _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  return _mm512_reduce_add_ps(sum) - mins;
}

// Q6_K: x = d * sc[g] * (q - 32) over 16 groups of 16, q < 64. For half h,
// ql[64h .. 64h + 63]'s low nibbles are elements 128h + 0..63 and its high
// nibbles 128h + 64..127; bits 4-5 of element 128h + 32s + l are bits 2s,
// 2s + 1 of qh[32h + l]. The -32 comes in through LaneOffsets.
float DotQ6K(const BlockQ6_K* w, int64_t nb, const Acts& a) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i bits45 = _mm512_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& k = w[b];
    const int8_t* x = a.q + kQK_K * b;
    const int32_t* off = a.off + (kQK_K / 4) * b;
    const __m512 scales = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(k.scales)))),
        _mm512_set1_ps(Half(k.d) * a.d[b]));
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
      for (int i = 0; i < 2; ++i) {
        const int e = 2 * h + i;  // elements 64e .. 64e + 63, groups 4e..
        const __m512i dp =
            _mm512_dpbusd_epi32(Load64(off + 16 * e), v[i], Load64(x + 64 * e));
        const __m512 s = _mm512_permutexvar_ps(GroupIndex(kIdx4, e), scales);
        acc[e] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), s, acc[e]);
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),
                                            _mm512_add_ps(acc[2], acc[3])));
}

// The offset whose LaneOffsets a type's dot starts from (0: none).
int WeightOffset(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return 128;
    case DType::kQ4_0:
      return 8;
    case DType::kQ6_K:
      return 32;
    default:
      return 0;
  }
}

template <typename Block, int kElems,
          float (*Dot)(const Block*, int64_t, const Acts&)>
void Rows(const void* w, int64_t row_bytes, int64_t n_rows, int64_t n_in,
          const Acts* acts, int n_tok, float* y, int64_t ldy) {
  const int64_t nb = n_in / kElems;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* row = reinterpret_cast<const Block*>(
        static_cast<const char*>(w) + r * row_bytes);
    for (int k = 0; k < n_tok; ++k) y[k * ldy + r] = Dot(row, nb, acts[k]);
  }
}

}  // namespace

bool HasFusedDot(DType t, int64_t n_in) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
      return n_in % 32 == 0;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return n_in % kQK_K == 0;
    default:
      return false;
  }
}

void FusedGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  const bool super = BlockSize(t) == kQK_K;
  const int offset = WeightOffset(t);
  // Activations padded to 64 (block form: to kChunk already).
  const int64_t lanes = (n_in + 63) / 64 * 16;
  thread_local std::vector<int32_t> offsets;
  thread_local std::vector<Acts> forms;
  offsets.assign(offset != 0 ? lanes * n_tok : 0, 0);
  forms.resize(n_tok);
  for (int k = 0; k < n_tok; ++k) {
    const QuantizedActs& q = acts[k];
    Acts& f = forms[k];
    f.q = super ? q.qk.data() : q.q.data();
    f.d = super ? q.dk.data() : q.d.data();
    f.s16 = super ? q.sumk16.data() : nullptr;
    f.off = nullptr;
    if (offset != 0) {
      int32_t* o = offsets.data() + k * lanes;
      LaneOffsets(f.q, lanes * 4, offset, o);
      f.off = o;
    }
  }
  const Acts* a = forms.data();
  switch (t) {
    case DType::kQ8_0:
      return Rows<BlockQ8_0, 32, DotBlocks32<BlockQ8_0, PairQ8_0>>(
          w, row_bytes, n_rows, n_in, a, n_tok, y, ldy);
    case DType::kQ4_0:
      return Rows<BlockQ4_0, 32, DotBlocks32<BlockQ4_0, PairQ4_0>>(
          w, row_bytes, n_rows, n_in, a, n_tok, y, ldy);
    case DType::kQ4_K:
      return Rows<BlockQ4_K, kQK_K, DotQ45K<BlockQ4_K>>(w, row_bytes, n_rows,
                                                        n_in, a, n_tok, y, ldy);
    case DType::kQ5_K:
      return Rows<BlockQ5_K, kQK_K, DotQ45K<BlockQ5_K>>(w, row_bytes, n_rows,
                                                        n_in, a, n_tok, y, ldy);
    case DType::kQ6_K:
      return Rows<BlockQ6_K, kQK_K, DotQ6K>(w, row_bytes, n_rows, n_in, a,
                                            n_tok, y, ldy);
    default:
      return;
  }
}

}  // namespace ckv::kernels::cpu::avx512q
