#include "kernels/dtype.h"

#include <cctype>
#include <cmath>

#include "kernels/quant_blocks.h"

namespace ckv::kernels {

namespace {

struct TypeTraits {
  const char* name;
  int block_size;
  int block_bytes;
};

// Block sizes and bytes as in the GGUF/ggml format (see quant_blocks.h).
TypeTraits Traits(DType t) {
  switch (t) {
    case DType::kF32:
      return {"F32", 1, 4};
    case DType::kF16:
      return {"F16", 1, 2};
    case DType::kBF16:
      return {"BF16", 1, 2};
    case DType::kQ4_0:
      return {"Q4_0", 32, sizeof(BlockQ4_0)};
    case DType::kQ4_1:
      return {"Q4_1", 32, sizeof(BlockQ4_1)};
    case DType::kQ5_0:
      return {"Q5_0", 32, sizeof(BlockQ5_0)};
    case DType::kQ5_1:
      return {"Q5_1", 32, sizeof(BlockQ5_1)};
    case DType::kQ8_0:
      return {"Q8_0", 32, sizeof(BlockQ8_0)};
    case DType::kQ2_K:
      return {"Q2_K", kQK_K, sizeof(BlockQ2_K)};
    case DType::kQ3_K:
      return {"Q3_K", kQK_K, sizeof(BlockQ3_K)};
    case DType::kQ4_K:
      return {"Q4_K", kQK_K, sizeof(BlockQ4_K)};
    case DType::kQ5_K:
      return {"Q5_K", kQK_K, sizeof(BlockQ5_K)};
    case DType::kQ6_K:
      return {"Q6_K", kQK_K, sizeof(BlockQ6_K)};
    case DType::kIQ4_NL:
      return {"IQ4_NL", 32, sizeof(BlockIQ4_NL)};
    case DType::kIQ4_XS:
      return {"IQ4_XS", kQK_K, sizeof(BlockIQ4_XS)};
  }
  return {"?", 0, 0};
}

}  // namespace

const char* DTypeName(DType t) { return Traits(t).name; }

bool ParseDTypeName(const char* name, DType* out) {
  for (uint32_t id = 0; id <= static_cast<uint32_t>(DType::kBF16); ++id) {
    if (!IsKnownDType(id)) continue;
    const char* a = DTypeName(static_cast<DType>(id));
    const char* b = name;
    while (*a != '\0' && *b != '\0' &&
           std::tolower(static_cast<unsigned char>(*a)) ==
               std::tolower(static_cast<unsigned char>(*b))) {
      ++a;
      ++b;
    }
    if (*a == '\0' && *b == '\0') {
      *out = static_cast<DType>(id);
      return true;
    }
  }
  return false;
}

bool IsKnownDType(uint32_t id) {
  return Traits(static_cast<DType>(id)).block_size != 0;
}

bool IsQuantized(DType t) { return Traits(t).block_size > 1; }

int BlockSize(DType t) { return Traits(t).block_size; }

int BlockBytes(DType t) { return Traits(t).block_bytes; }

int64_t RowBytes(DType t, int64_t n) {
  const TypeTraits tr = Traits(t);
  if (tr.block_size == 0 || n < 0 || n % tr.block_size != 0) return -1;
  return n / tr.block_size * tr.block_bytes;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below F16 normal range
    // Subnormal F16: value = m * 2^-24; round |f| * 2^24 to nearest even.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return sign | static_cast<uint16_t>(m);
  }
  // Normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even.
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

}  // namespace ckv::kernels
