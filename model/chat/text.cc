#include "model/chat/text.h"

#include <ctime>

#include "absl/strings/ascii.h"

namespace ckv::chat {
namespace {

// Length of the well-formed UTF-8 character at s[i], else 1.
size_t CharLen(std::string_view s, size_t i) {
  const unsigned char c = s[i];
  const size_t n = c < 0x80         ? 1
                   : (c >> 5) == 6  ? 2
                   : (c >> 4) == 14 ? 3
                   : (c >> 3) == 30 ? 4
                                    : 1;
  if (n == 1 || i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

bool InSet(std::string_view ch, const std::optional<std::string>& chars) {
  if (!chars.has_value()) return IsPySpace(ch);
  for (std::string_view c : SplitCodePoints(*chars)) {
    if (c == ch) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string_view> SplitCodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = CharLen(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

int64_t CodePointCount(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); i += CharLen(s, i)) ++n;
  return n;
}

bool IsPySpace(std::string_view ch) {
  if (ch.size() == 1) {
    const unsigned char c = ch[0];
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  }
  static constexpr std::string_view kSpaces[] = {
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80",
      "\xE2\x80\x81", "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84",
      "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88",
      "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8", "\xE2\x80\xA9",
      "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  for (std::string_view sp : kSpaces) {
    if (ch == sp) return true;
  }
  return false;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    StripSide side) {
  const std::vector<std::string_view> cps = SplitCodePoints(s);
  size_t begin = 0, end = cps.size();
  if (side != StripSide::kRight) {
    while (begin < end && InSet(cps[begin], chars)) ++begin;
  }
  if (side != StripSide::kLeft) {
    while (end > begin && InSet(cps[end - 1], chars)) --end;
  }
  if (begin == end) return "";
  const size_t from = cps[begin].data() - s.data();
  const size_t to = cps[end - 1].data() + cps[end - 1].size() - s.data();
  return std::string(s.substr(from, to - from));
}

std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.has_value()) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  const std::vector<std::string_view> cps = SplitCodePoints(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPySpace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with trailing whitespace stripped.
      out.push_back(PyStrip(s.substr(cps[i].data() - s.data()), std::nullopt,
                            StripSide::kRight));
      return out;
    }
    std::string word;
    while (i < cps.size() && !IsPySpace(cps[i])) word += cps[i++];
    out.push_back(std::move(word));
  }
  return out;
}

std::string PyReplace(std::string_view s, std::string_view from,
                      std::string_view to, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (from.empty()) {
    const std::vector<std::string_view> cps = SplitCodePoints(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t start = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += to;
    start = at + from.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

std::string AsciiLower(std::string_view s) {
  return absl::AsciiStrToLower(AV(s));
}
std::string AsciiUpper(std::string_view s) {
  return absl::AsciiStrToUpper(AV(s));
}

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    const bool alpha = absl::ascii_isalpha(static_cast<unsigned char>(c));
    if (alpha) {
      c = prev_cased ? absl::ascii_tolower(c) : absl::ascii_toupper(c);
    }
    prev_cased = alpha;
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

std::string FormatDate(std::string_view fmt, int year, int month, int day) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_isdst = 0;
  std::time_t t = timegm(&tm);  // fills tm_wday and tm_yday
  gmtime_r(&t, &tm);
  // One conversion at a time, so the output buffer is always large enough.
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 == fmt.size()) {
      out += fmt[i];
      continue;
    }
    char spec[4] = {'%', fmt[i + 1], 0, 0};
    ++i;
    if (std::string_view("aAbBcdHIjmMpSUwWxXyYZz%GguVeCDFhnrRtTsPkl")
            .find(spec[1]) == std::string_view::npos) {
      out += spec;  // unknown conversion: kept as written
      continue;
    }
    char buf[128];
    const size_t n = std::strftime(buf, sizeof(buf), spec, &tm);
    out.append(buf, n);
  }
  return out;
}

}  // namespace ckv::chat
