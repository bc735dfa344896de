// Python str operations on UTF-8 text, by code point, as the chat-template
// interpreter needs them (Python strings index and strip code points).
// Invalid UTF-8 bytes count as one code point each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace ckv::chat {

// std::string_view as absl::string_view (for absl::StrCat and friends).
inline absl::string_view AV(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// The text split into code points (each a view into `s`).
std::vector<std::string_view> SplitCodePoints(std::string_view s);
// Number of code points.
int64_t CodePointCount(std::string_view s);
// Python str.isspace() for one code point's UTF-8 text.
bool IsPySpace(std::string_view ch);

enum class StripSide { kLeft, kRight, kBoth };
// str.strip/lstrip/rstrip: `chars` = nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    StripSide side);
// str.split(sep, maxsplit): sep = nullopt splits on whitespace runs.
// sep must not be empty.
std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all. Empty `from` inserts
// `to` between code points, as Python does.
std::string PyReplace(std::string_view s, std::string_view from,
                      std::string_view to, int64_t count);
// ASCII case mapping (non-ASCII text is left as is).
std::string AsciiLower(std::string_view s);
std::string AsciiUpper(std::string_view s);
// str.title() / str.capitalize() on ASCII letters.
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);

// strftime(fmt) for the fixed time (year, month 1-12, day, 00:00:00).
std::string FormatDate(std::string_view fmt, int year, int month, int day);

}  // namespace ckv::chat
