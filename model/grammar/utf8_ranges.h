// Code point ranges lowered to UTF-8 byte-range sequences: every code point
// in [lo, hi] (surrogates excluded) encodes to exactly one sequence whose
// i-th byte lies in its i-th range.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ckv::grammar {

using CodepointRange = std::pair<uint32_t, uint32_t>;  // inclusive
using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, merged, surrogate-free ranges.
std::vector<CodepointRange> Normalize(std::vector<CodepointRange> ranges);
// The complement of normalized ranges within [0, kMaxCodepoint] minus the
// surrogates.
std::vector<CodepointRange> Complement(const std::vector<CodepointRange>& r);
// Appends the byte-range sequences of normalized ranges to `out`.
void ToUtf8Sequences(const std::vector<CodepointRange>& ranges,
                     std::vector<ByteRangeSeq>* out);
// UTF-8 encoding of a valid code point.
void AppendUtf8(uint32_t cp, std::string* out);
// Decodes one code point at s[*i]; false (and *i unchanged) when invalid.
bool DecodeUtf8(const std::string& s, size_t* i, uint32_t* cp);

}  // namespace ckv::grammar
