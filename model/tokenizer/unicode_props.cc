// Unicode property lookups (see unicode_props.h). Categories come from
// PCRE2's Unicode tables; the two mappings from unicode_tables.cc.

#include "model/tokenizer/unicode_props.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "model/tokenizer/utf8.h"

namespace ckv::tokenizer_internal {
namespace {

// One anchored pattern per class bit, compiled once. Compiled code is
// immutable and shared by threads.
struct CategoryMatchers {
  pcre2_code* control = nullptr;
  pcre2_code* mark = nullptr;
  pcre2_code* punctuation = nullptr;
  pcre2_code* symbol = nullptr;
};

pcre2_code* Compile(const char* pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern),
                       PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED,
                       &error, &offset, nullptr);
}

const CategoryMatchers& Matchers() {
  static const CategoryMatchers m = {Compile(R"([\p{Cc}\p{Cf}\p{Co}])"),
                                     Compile(R"(\p{M})"), Compile(R"(\p{P})"),
                                     Compile(R"(\p{S})")};
  return m;
}

bool Matches(pcre2_code* code, uint32_t cp) {
  if (code == nullptr) return false;
  std::string utf8;
  AppendUtf8(cp, &utf8);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(utf8.data()),
                             utf8.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  return rc > 0;
}

}  // namespace

bool IsUnicodeWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t CategoryBits(uint32_t cp) {
  if (cp < 0x80) {  // ASCII without the regex engine
    if (cp < 0x20 || cp == 0x7F) return kCatControl;
    if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') ||
        (cp >= 'a' && cp <= 'z') || cp == ' ') {
      return 0;
    }
    const char c = static_cast<char>(cp);
    for (char s : {'$', '+', '<', '=', '>', '^', '`', '|', '~'}) {
      if (c == s) return kCatSymbol;
    }
    return kCatPunctuation;
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) return kCatControl;  // Cs
  if (cp > 0x10FFFF) return 0;
  const CategoryMatchers& m = Matchers();
  uint32_t bits = 0;
  if (Matches(m.control, cp)) bits |= kCatControl;
  if (Matches(m.mark, cp)) bits |= kCatMark;
  if (Matches(m.punctuation, cp)) bits |= kCatPunctuation;
  if (Matches(m.symbol, cp)) bits |= kCatSymbol;
  return bits;
}

uint32_t UnicodeToLower(uint32_t cp) {
  const LowerRange* end = kLowerRanges + kNumLowerRanges;
  const LowerRange* it = std::upper_bound(
      kLowerRanges, end, cp,
      [](uint32_t c, const LowerRange& r) { return c < r.first; });
  if (it == kLowerRanges) return cp;
  --it;
  if (cp > it->last || (cp - it->first) % it->stride != 0) return cp;
  return static_cast<uint32_t>(static_cast<int64_t>(cp) + it->delta);
}

uint32_t NfdBase(uint32_t cp) {
  const NfdRange* end = kNfdRanges + kNumNfdRanges;
  const NfdRange* it = std::upper_bound(
      kNfdRanges, end, cp,
      [](uint32_t c, const NfdRange& r) { return c < r.first; });
  if (it == kNfdRanges) return cp;
  --it;
  return cp <= it->last ? it->base : cp;
}

}  // namespace ckv::tokenizer_internal
