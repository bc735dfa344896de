// Per-code-point Unicode properties as llama.cpp's tokenizers use them
// (unicode.cpp): White_Space, general-category classes, the simple lowercase
// mapping and the first code point of the canonical decomposition. Not part
// of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckv::tokenizer_internal {

// llama.cpp's whitespace set (Unicode White_Space, U+0085 included).
bool IsUnicodeWhitespace(uint32_t cp);

// General-category classes, as bits: control is Cc, Cf, Co or Cs (not the
// unassigned Cn); mark is M; punctuation P; symbol S.
enum CategoryBit : uint32_t {
  kCatControl = 1u << 0,
  kCatMark = 1u << 1,
  kCatPunctuation = 1u << 2,
  kCatSymbol = 1u << 3,
};
uint32_t CategoryBits(uint32_t cp);

// Simple lowercase mapping (first code point of the full mapping); `cp`
// itself when it has none.
uint32_t UnicodeToLower(uint32_t cp);

// First code point of the canonical decomposition (the base character of an
// accented letter, the leading jamo of a Hangul syllable); `cp` itself when
// it has none.
uint32_t NfdBase(uint32_t cp);

// Generated tables (unicode_tables.cc), sorted by `first`.
struct LowerRange {
  uint32_t first, last, stride;
  int32_t delta;  // cp in first..last (every `stride`) maps to cp + delta
};
struct NfdRange {
  uint32_t first, last, base;  // every cp in first..last maps to base
};
extern const LowerRange kLowerRanges[];
extern const size_t kNumLowerRanges;
extern const NfdRange kNfdRanges[];
extern const size_t kNumNfdRanges;

}  // namespace ckv::tokenizer_internal
