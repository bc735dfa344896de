// Block layouts of the GGUF/ggml quantised tensor types, byte for byte as
// stored in the file. Framework-free (kernels/cpu, kernels/cuda, model/).
//
// Every block holds BlockSize(type) consecutive elements of one row. "d",
// "m", "dmin" are F16 bits. Element values (x) are given per type below;
// kernels/ref/quant.cc is the executable statement of these formulas.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels {

inline constexpr int kQK_K = 256;        // elements of a K-quant super-block
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales of Q4_K/Q5_K

// Q4_0: x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: as Q4_0 without the -8, plus m: x = d * q + m.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: 5-bit q = low nibble as Q4_0 | bit j of qh (little-endian uint32)
// as bit 4 for x[j], bit j + 16 for x[j + 16]; x = d * (q - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: q as Q5_0; x = d * q + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q2_K: 16 sub-blocks of 16. scales[i]: low nibble = scale, high = min of
// sub-block i. Element order: for each half h (128 elements, qs[32h..32h+32))
// and shift s = 0,2,4,6: 32 elements (qs[32h + l] >> s) & 3, l < 32, the
// first 16 in sub-block 8h + 2(s/2), the next 16 in the following one.
// x = d * scale * q - dmin * min.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (packed in 12 bytes,
// minus 32). Low 2 bits as Q2_K; the high bit comes from hmask[l] bit
// (2h + s/2) for element index l (< 32) of the 32-run; a cleared bit
// subtracts 4. x = d * (scale - 32) * q.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min (packed in 12 bytes).
// For each 64-run c: 32 low nibbles of qs[32c..), then the 32 high nibbles.
// x = d * scale * q - dmin * min.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K plus bit 4 from qh[l] bit 2c (low nibbles) / 2c+1 (high).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16, int8 scales. 6-bit q = 4 bits from ql, 2 from
// qh; x = d * scale * (q - 32). See kernels/ref/quant.cc for the element order.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// IQ4_NL: x[j] = d * kIq4Values[qs[j] & 15], x[j + 16] with qs[j] >> 4.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_XS: 8 sub-blocks of 32, each like an IQ4_NL block with the scale
// d * (ls - 32); ls = 4 bits of scales_l, 2 bits of scales_h (6 bits).
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The non-linear 4-bit code book of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIq4Values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Scale and min of sub-block j (< 8) of the 12 packed bytes of Q4_K/Q5_K:
// j < 4: low 6 bits of bytes j and j+4; else 4 bits of byte j+4 and the top
// 2 bits of bytes j-4 and j.
inline void UnpackScaleMinK4(int j, const uint8_t* q, uint8_t* sc,
                             uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 16 6-bit scales (0..63, before the -32) of a Q3_K block: the low 4
// bits of scale i are nibble (i / 8) of byte i % 8; the high 2 bits are bits
// 2 * (i / 4) .. +1 of byte 8 + i % 4.
inline void UnpackScalesQ3K(const uint8_t* s, uint8_t out[16]) {
  for (int i = 0; i < 16; ++i) {
    const int lo = (s[i % 8] >> (4 * (i / 8))) & 0xF;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace ckv::kernels
