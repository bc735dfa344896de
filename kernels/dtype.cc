#include "kernels/dtype.h"

#include <cmath>

namespace ckv::kernels {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kQ8_0: return "Q8_0";
  }
  return "?";
}

int64_t RowBytes(DType t, int64_t n) {
  switch (t) {
    case DType::kF32: return 4 * n;
    case DType::kF16:
    case DType::kBF16: return 2 * n;
    case DType::kQ8_0:
      if (n % kQ8_0BlockSize != 0) return -1;
      return n / kQ8_0BlockSize * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  return -1;
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
