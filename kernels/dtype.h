// Element types of weights and KV rows, and scalar conversions.
// Framework-free: included by kernels/cpu, kernels/cuda and model/.
#pragma once

#include <cstdint>
#include <cstring>

namespace ckv::kernels {

// Values match GGML's type ids so that GGUF tensor types map 1:1.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

// Q8_0: blocks of 32 values, each an F16 scale d followed by 32 int8 q;
// value = d * q.
inline constexpr int kQ8_0BlockSize = 32;
struct BlockQ8_0 {
  uint16_t d;  // F16 bits
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

const char* DTypeName(DType t);

// The type named `name` (DTypeName spelling, any case: "q4_k", "F16").
// False if no type has that name.
bool ParseDTypeName(const char* name, DType* out);

// True for every GGML type id listed in DType.
bool IsKnownDType(uint32_t id);
// True for the block-quantised types (Q4_0 ... IQ4_XS, Q8_0).
bool IsQuantized(DType t);
// Elements per block (1 for F32/F16/BF16) and bytes per block.
int BlockSize(DType t);
int BlockBytes(DType t);

// Bytes of one row of n elements; -1 if n is not a multiple of the block
// size of a block type.
int64_t RowBytes(DType t, int64_t n);

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even F32 -> F16 (overflow to inf, NaN preserved).
uint16_t F32ToF16(float f);

inline float BF16ToF32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even F32 -> BF16 (NaN stays NaN).
inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace ckv::kernels
