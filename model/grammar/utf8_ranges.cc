#include "model/grammar/utf8_ranges.h"

#include <algorithm>

namespace ckv::grammar {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int EncodedLength(uint32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

void Encode(uint32_t cp, uint8_t* b) {
  switch (EncodedLength(cp)) {
    case 1:
      b[0] = static_cast<uint8_t>(cp);
      break;
    case 2:
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// [lo, hi] of one encoded length: split until each piece is a product of
// byte ranges (the usual utf8-ranges construction).
void SplitSameLength(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>* out) {
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, out);
        SplitSameLength((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, out);
        SplitSameLength(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  Encode(lo, a);
  Encode(hi, b);
  ByteRangeSeq seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

}  // namespace

std::vector<CodepointRange> Normalize(std::vector<CodepointRange> ranges) {
  std::vector<CodepointRange> cut;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min(hi, kMaxCodepoint);
    if (lo > kMaxCodepoint) continue;
    if (lo < kSurrogateLo && hi >= kSurrogateLo) {
      cut.emplace_back(lo, kSurrogateLo - 1);
      lo = kSurrogateLo;
    }
    if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
      if (hi <= kSurrogateHi) continue;
      lo = kSurrogateHi + 1;
    }
    cut.emplace_back(lo, hi);
  }
  std::sort(cut.begin(), cut.end());
  std::vector<CodepointRange> out;
  for (const auto& r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodepointRange> Complement(const std::vector<CodepointRange>& r) {
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return Normalize(std::move(out));
}

void ToUtf8Sequences(const std::vector<CodepointRange>& ranges,
                     std::vector<ByteRangeSeq>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (auto [lo, hi] : ranges) {
    for (uint32_t end : kLengthEnds) {
      if (lo > end) continue;
      const uint32_t piece_hi = std::min(hi, end);
      SplitSameLength(lo, piece_hi, out);
      if (piece_hi == hi) break;
      lo = piece_hi + 1;
    }
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  uint8_t b[4];
  Encode(cp, b);
  out->append(reinterpret_cast<const char*>(b), EncodedLength(cp));
}

bool DecodeUtf8(const std::string& s, size_t* i, uint32_t* cp) {
  const size_t p = *i;
  if (p >= s.size()) return false;
  const auto c0 = static_cast<uint8_t>(s[p]);
  int n;
  uint32_t v;
  if (c0 < 0x80) {
    n = 1, v = c0;
  } else if ((c0 & 0xE0) == 0xC0) {
    n = 2, v = c0 & 0x1F;
  } else if ((c0 & 0xF0) == 0xE0) {
    n = 3, v = c0 & 0x0F;
  } else if ((c0 & 0xF8) == 0xF0) {
    n = 4, v = c0 & 0x07;
  } else {
    return false;
  }
  if (p + n > s.size()) return false;
  for (int k = 1; k < n; ++k) {
    const auto c = static_cast<uint8_t>(s[p + k]);
    if ((c & 0xC0) != 0x80) return false;
    v = (v << 6) | (c & 0x3F);
  }
  if (EncodedLength(v) != n || v > kMaxCodepoint ||
      (v >= kSurrogateLo && v <= kSurrogateHi)) {
    return false;
  }
  *cp = v;
  *i = p + n;
  return true;
}

}  // namespace ckv::grammar
