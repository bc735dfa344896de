#include "model/tokenizer/utf8.h"

#include <array>

namespace ckv::tokenizer_internal {
namespace {

bool IsCont(uint8_t b) { return (b & 0xC0) == 0x80; }

// Allowed range of the second byte for a multi-byte lead (RFC 3629 table).
void SecondByteRange(uint8_t lead, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead == 0xE0) *lo = 0xA0;
  if (lead == 0xED) *hi = 0x9F;
  if (lead == 0xF0) *lo = 0x90;
  if (lead == 0xF4) *hi = 0x8F;
}

// Code point <-> byte tables of the GPT-2 byte-level mapping: printable
// Latin-1 bytes map to themselves, the rest to 256, 257, ... in byte order.
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> cp_to_byte;

  ByteLevelTables() {
    cp_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                        (b >= 0xAE && b <= 0xFF);
      const int cp = keep ? b : next++;
      AppendUtf8(static_cast<uint32_t>(cp), &byte_to_utf8[b]);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables* tables = new ByteLevelTables();
  return *tables;
}

}  // namespace

int DecodeUtf8Char(absl::string_view s, uint32_t* cp) {
  if (s.empty()) return kUtf8Truncated;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    if (cp) *cp = b0;
    return 1;
  }
  int len;
  uint32_t value;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    value = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    value = b0 & 0x07;
  } else {
    return kUtf8Invalid;
  }
  uint8_t lo, hi;
  SecondByteRange(b0, &lo, &hi);
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return kUtf8Truncated;
    const uint8_t b = p[i];
    if (i == 1 ? (b < lo || b > hi) : !IsCont(b)) return kUtf8Invalid;
    value = (value << 6) | (b & 0x3F);
  }
  if (cp) *cp = value;
  return len;
}

size_t FirstInvalidUtf8(absl::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const int len = DecodeUtf8Char(s.substr(i), nullptr);
    if (len <= 0) return i;
    i += static_cast<size_t>(len);
  }
  return n;
}

int Utf8LenFromLead(uint8_t lead) {
  static constexpr int kLens[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                    1, 1, 1, 1, 2, 2, 3, 4};
  return kLens[lead >> 4];
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

absl::string_view ByteToUnicode(uint8_t b) { return Tables().byte_to_utf8[b]; }

int UnicodeToByte(uint32_t cp) {
  if (cp >= Tables().cp_to_byte.size()) return -1;
  return Tables().cp_to_byte[cp];
}

}  // namespace ckv::tokenizer_internal
