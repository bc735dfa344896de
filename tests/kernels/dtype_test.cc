// F16/BF16 conversions against brute-force definitions: every F16 bit
// pattern decodes exactly; F32 -> F16/BF16 picks the nearest representable
// value with ties to even, including subnormals, overflow, inf and NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/dtype.h"

namespace ckv::kernels {
namespace {

float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Value of F16 bits from the definition.
double F16Value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) {
    return mant ? std::numeric_limits<double>::quiet_NaN()
                : sign * std::numeric_limits<double>::infinity();
  }
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(DTypeTest, F16ToF32AllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = F16Value(static_cast<uint16_t>(h));
    const float got = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << h;
      EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << h;
    }
  }
}

// Nearest F16 (ties to even) by search over all finite positive values.
uint16_t BruteF32ToF16(float f) {
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (uint16_t h = 0; h < 0x7c00; ++h) t.push_back(F16Value(h));
    t.push_back(65536.0);  // 0x7c00: where the next value would be -> inf
    return t;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65536.0) return sign | 0x7c00;
  auto it = std::lower_bound(table.begin(), table.end(), a);
  const uint16_t hi = static_cast<uint16_t>(it - table.begin());
  if (hi < table.size() && table[hi] == a) return sign | hi;
  const uint16_t lo = hi - 1;
  const double dl = a - table[lo], dh = table[hi] - a;
  if (dl < dh) return sign | lo;
  if (dh < dl) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

std::vector<float> ConversionSamples() {
  std::vector<float> s;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 40009) {
    s.push_back(BitsToFloat(static_cast<uint32_t>(b)));
  }
  // Every F16 value, the midpoints between neighbours (exact ties) and the
  // floats just around them.
  for (uint16_t h = 0; h < 0x7c00; ++h) {
    const double v = F16Value(h), next = F16Value(h + 1);
    const float mid = static_cast<float>((v + next) / 2);
    for (float x : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                    std::nextafter(mid, 1e9f)}) {
      s.push_back(x);
      s.push_back(-x);
    }
  }
  s.push_back(std::numeric_limits<float>::infinity());
  s.push_back(-std::numeric_limits<float>::infinity());
  s.push_back(std::numeric_limits<float>::denorm_min());
  s.push_back(65519.99f);
  s.push_back(65520.0f);
  s.push_back(1e-8f);  // below half the smallest subnormal
  return s;
}

TEST(DTypeTest, F32ToF16RoundsToNearestEven) {
  for (float f : ConversionSamples()) {
    const uint16_t got = F32ToF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(got))) << f;
      continue;
    }
    ASSERT_EQ(got, BruteF32ToF16(f)) << "f=" << f;
  }
}

// Nearest BF16 by comparing the two bracketing candidates.
uint16_t BruteF32ToBF16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(b >> 16);
  if ((b & 0xffff) == 0) return lo;
  const uint16_t hi = lo + 1;  // next magnitude (may become inf)
  const double a = std::fabs(static_cast<double>(f));
  const double vl = std::fabs(double{BitsToFloat(uint32_t{lo} << 16)});
  // Past the largest finite BF16 the next value would be 2^128 (-> inf).
  const double vh = (hi & 0x7fff) == 0x7f80
                        ? std::ldexp(1.0, 128)
                        : std::fabs(double{BitsToFloat(uint32_t{hi} << 16)});
  if (a - vl < vh - a) return lo;
  if (vh - a < a - vl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(DTypeTest, F32ToBF16RoundsToNearestEven) {
  for (float f : ConversionSamples()) {
    const uint16_t got = F32ToBF16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BF16ToF32(got))) << f;
      continue;
    }
    ASSERT_EQ(got, BruteF32ToBF16(f)) << "f=" << f;
  }
  // Exact ties between BF16 neighbours.
  EXPECT_EQ(F32ToBF16(BitsToFloat(0x3f808000u)), 0x3f80);  // even stays
  EXPECT_EQ(F32ToBF16(BitsToFloat(0x3f818000u)), 0x3f82);  // odd rounds up
  EXPECT_EQ(F32ToBF16(BitsToFloat(0x7f7fffffu)), 0x7f80);  // overflow -> inf
}

TEST(DTypeTest, NaNStaysNaN) {
  for (uint32_t b : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu}) {
    const float f = BitsToFloat(b);
    EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
    EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(f))));
  }
}

TEST(DTypeTest, RowBytes) {
  EXPECT_EQ(RowBytes(DType::kF32, 7), 28);
  EXPECT_EQ(RowBytes(DType::kF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kBF16, 7), 14);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 33), -1);
}

}  // namespace
}  // namespace ckv::kernels
