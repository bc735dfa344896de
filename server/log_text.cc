#include "server/log_text.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::server {
namespace {

// Length of the valid UTF-8 sequence at the start of `s` and its code
// point; 0 when it is not valid (overlong, surrogate, > U+10FFFF, cut).
size_t DecodeUtf8(absl::string_view s, uint32_t* cp) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint32_t v = 0, min = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i) & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// Code points that are printable but change how a line reads.
bool IsUnsafeCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E ||
         cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0xFEFF;
}

std::string Escape(absl::string_view text, size_t max_bytes,
                   bool escape_space) {
  const size_t full = text.size();
  if (text.size() > max_bytes) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
    } else if ((c > 0x20 && c < 0x7F) || (c == 0x20 && !escape_space)) {
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x80) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
      ++i;
    } else {
      uint32_t cp = 0;
      const size_t n = DecodeUtf8(text.substr(i), &cp);
      if (n == 0) {
        absl::StrAppendFormat(&out, "\\x%02x", c);
        ++i;
      } else if (IsUnsafeCodePoint(cp)) {
        absl::StrAppendFormat(&out, "\\u{%04X}", cp);
        i += n;
      } else {
        out.append(text.data() + i, n);
        i += n;
      }
    }
  }
  if (full > text.size()) absl::StrAppend(&out, "...(", full, " bytes)");
  return out;
}

}  // namespace

std::string EscapeText(absl::string_view text, size_t max_bytes) {
  return Escape(text, max_bytes, /*escape_space=*/false);
}

std::string EscapeLogField(absl::string_view text, size_t max_bytes) {
  return Escape(text, max_bytes, /*escape_space=*/true);
}

}  // namespace ckv::server
