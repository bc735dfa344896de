// Scalar reference dequantisation of every block type (the oracle for the
// fast quantised kernels and the quantiser's round trip). One function per
// block; formulas as documented in kernels/quant_blocks.h.
#include <cstring>

#include "kernels/ref/ops.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::ref {
namespace {

float H(uint16_t h) { return F16ToF32(h); }

void BlockQ4_0ToF32(const BlockQ4_0& b, float* y) {
  const float d = H(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * ((b.qs[j] & 0xF) - 8);
    y[j + 16] = d * ((b.qs[j] >> 4) - 8);
  }
}

void BlockQ4_1ToF32(const BlockQ4_1& b, float* y) {
  const float d = H(b.d), m = H(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (b.qs[j] & 0xF) + m;
    y[j + 16] = d * (b.qs[j] >> 4) + m;
  }
}

// The 5-bit values of a Q5_0/Q5_1 block.
void Q5Values(const uint8_t* qh_bytes, const uint8_t* qs, int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
  }
}

void BlockQ5_0ToF32(const BlockQ5_0& b, float* y) {
  int q[32];
  Q5Values(b.qh, b.qs, q);
  const float d = H(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * (q[j] - 16);
}

void BlockQ5_1ToF32(const BlockQ5_1& b, float* y) {
  int q[32];
  Q5Values(b.qh, b.qs, q);
  const float d = H(b.d), m = H(b.m);
  for (int j = 0; j < 32; ++j) y[j] = d * q[j] + m;
}

void BlockQ8_0ToF32(const BlockQ8_0& b, float* y) {
  const float d = H(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * b.qs[j];
}

void BlockQ2_KToF32(const BlockQ2_K& b, float* y) {
  const float d = H(b.d), dmin = H(b.dmin);
  int sub = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sub) {
        const float dl = d * (b.scales[sub] & 0xF);
        const float ml = dmin * (b.scales[sub] >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * ((q[16 * part + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void BlockQ3_KToF32(const BlockQ3_K& b, float* y) {
  uint8_t sc[16];
  UnpackScalesQ3K(b.scales, sc);
  const float d = H(b.d);
  int sub = 0;
  for (int half = 0; half < 2; ++half) {
    const uint8_t* q = b.qs + 32 * half;
    for (int s = 0; s < 4; ++s) {
      const uint8_t hbit = static_cast<uint8_t>(1u << (4 * half + s));
      for (int part = 0; part < 2; ++part, ++sub) {
        const float dl = d * (sc[sub] - 32);
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int low = (q[l] >> (2 * s)) & 3;
          *y++ = dl * (low - ((b.hmask[l] & hbit) ? 0 : 4));
        }
      }
    }
  }
}

void BlockQ4_KToF32(const BlockQ4_K& b, float* y) {
  const float d = H(b.d), dmin = H(b.dmin);
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    for (int hi = 0; hi < 2; ++hi) {
      uint8_t sc, mn;
      UnpackScaleMinK4(2 * c + hi, b.scales, &sc, &mn);
      const float dl = d * sc, ml = dmin * mn;
      for (int l = 0; l < 32; ++l) *y++ = dl * ((q[l] >> (4 * hi)) & 0xF) - ml;
    }
  }
}

void BlockQ5_KToF32(const BlockQ5_K& b, float* y) {
  const float d = H(b.d), dmin = H(b.dmin);
  for (int c = 0; c < 4; ++c) {
    const uint8_t* q = b.qs + 32 * c;
    for (int hi = 0; hi < 2; ++hi) {
      uint8_t sc, mn;
      UnpackScaleMinK4(2 * c + hi, b.scales, &sc, &mn);
      const float dl = d * sc, ml = dmin * mn;
      const int bit = 2 * c + hi;
      for (int l = 0; l < 32; ++l) {
        const int v =
            ((q[l] >> (4 * hi)) & 0xF) | (((b.qh[l] >> bit) & 1) << 4);
        *y++ = dl * v - ml;
      }
    }
  }
}

// Q6_K: per 128-half h, for l < 32 the four values l, l+32, l+64, l+96
// take ql[64h + l] low, ql[64h + l + 32] low, ql[64h + l] high,
// ql[64h + l + 32] high nibbles, with 2-bit pairs 0, 1, 2, 3 of qh[32h + l]
// as bits 4-5; sub-block of element e (< 256) is e / 16.
void BlockQ6_KToF32(const BlockQ6_K& b, float* y) {
  const float d = H(b.d);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    float* out = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {
          (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4),
          (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
          (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
          (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
      };
      for (int k = 0; k < 4; ++k) {
        const int e = 32 * k + l;
        out[e] = d * b.scales[8 * h + e / 16] * (q[k] - 32);
      }
    }
  }
}

void BlockIQ4_NLToF32(const BlockIQ4_NL& b, float* y) {
  const float d = H(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4Values[b.qs[j] & 0xF];
    y[j + 16] = d * kIq4Values[b.qs[j] >> 4];
  }
}

void BlockIQ4_XSToF32(const BlockIQ4_XS& b, float* y) {
  const float d = H(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                   (((b.scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * (ls - 32);
    const uint8_t* qs = b.qs + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * kIq4Values[qs[j] & 0xF];
      y[32 * ib + j + 16] = dl * kIq4Values[qs[j] >> 4];
    }
  }
}

template <typename Block, void (*Fn)(const Block&, float*), int kSize>
void Blocks(const void* src, int64_t n, float* dst) {
  const auto* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kSize; ++i) Fn(b[i], dst + i * kSize);
}

}  // namespace

void DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = t == DType::kF16 ? F16ToF32(h[i]) : BF16ToF32(h[i]);
      }
      return;
    }
    case DType::kQ4_0:
      return Blocks<BlockQ4_0, BlockQ4_0ToF32, 32>(src, n, dst);
    case DType::kQ4_1:
      return Blocks<BlockQ4_1, BlockQ4_1ToF32, 32>(src, n, dst);
    case DType::kQ5_0:
      return Blocks<BlockQ5_0, BlockQ5_0ToF32, 32>(src, n, dst);
    case DType::kQ5_1:
      return Blocks<BlockQ5_1, BlockQ5_1ToF32, 32>(src, n, dst);
    case DType::kQ8_0:
      return Blocks<BlockQ8_0, BlockQ8_0ToF32, 32>(src, n, dst);
    case DType::kQ2_K:
      return Blocks<BlockQ2_K, BlockQ2_KToF32, kQK_K>(src, n, dst);
    case DType::kQ3_K:
      return Blocks<BlockQ3_K, BlockQ3_KToF32, kQK_K>(src, n, dst);
    case DType::kQ4_K:
      return Blocks<BlockQ4_K, BlockQ4_KToF32, kQK_K>(src, n, dst);
    case DType::kQ5_K:
      return Blocks<BlockQ5_K, BlockQ5_KToF32, kQK_K>(src, n, dst);
    case DType::kQ6_K:
      return Blocks<BlockQ6_K, BlockQ6_KToF32, kQK_K>(src, n, dst);
    case DType::kIQ4_NL:
      return Blocks<BlockIQ4_NL, BlockIQ4_NLToF32, 32>(src, n, dst);
    case DType::kIQ4_XS:
      return Blocks<BlockIQ4_XS, BlockIQ4_XSToF32, kQK_K>(src, n, dst);
  }
}

}  // namespace ckv::kernels::ref
