// Pieces of the JSON Schema conversion: integer and number ranges and
// string formats as GBNF expressions (json_schema.h).
#pragma once

#include <cstdint>
#include <string>

namespace ckv::grammar {

// Unbounded sides: integers of at most 15 digits.
inline constexpr int64_t kNoLow = -999999999999999;
inline constexpr int64_t kNoHigh = 999999999999999;

// Integers in [lo, hi] in JSON's form (no leading zeros, no "-0"),
// lo <= hi within [kNoLow, kNoHigh].
std::string IntegerRangeGbnf(int64_t lo, int64_t hi);
// Numbers in [lo, hi] (integral bounds): an integer part and an optional
// fraction of at most 16 digits, no exponent.
std::string NumberRangeGbnf(int64_t lo, int64_t hi);
// The string content (between the quotes) of a format: date, time,
// date-time, uuid, email, ipv4, hostname, duration; "" when unsupported.
std::string FormatGbnf(const std::string& format);

}  // namespace ckv::grammar
