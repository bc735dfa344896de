#include "model/grammar/regex.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/utf8_ranges.h"

namespace ckv::grammar {
namespace {

std::string ClassBody(const std::vector<CodepointRange>& ranges) {
  std::string out = "[";
  auto put = [&out](uint32_t c) {
    char buf[16];
    if (c < 0x80 && c >= 0x20 && c != '\\' && c != ']' && c != '-' &&
        c != '^' && c != '"' && c != '[') {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08X", c);
      out += buf;
    }
  };
  for (auto [lo, hi] : ranges) {
    put(lo);
    if (hi != lo) {
      out.push_back('-');
      put(hi);
    }
  }
  return out + "]";
}

// The JSON escape of one code point that must be escaped.
std::string Escaped(uint32_t c) {
  if (c == '"') return "\\\"";
  if (c == '\\') return "\\\\";
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", c);
  return buf;
}

std::vector<CodepointRange> Ascii(std::vector<CodepointRange> r) {
  return Normalize(std::move(r));
}

class RegexParser {
 public:
  RegexParser(absl::string_view s, const GrammarLimits& limits)
      : s_(s), limits_(limits) {}

  absl::StatusOr<std::string> Parse() {
    if (s_.size() > limits_.max_source_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("pattern: ", s_.size(),
                                                     " bytes; the limit is ",
                                                     limits_.max_source_bytes));
    }
    bool head = false, tail = false;
    if (!s_.empty() && s_[0] == '^') {
      head = true;
      p_ = 1;
    }
    std::string body = Alternation(0);
    if (error_.empty() && p_ < s_.size()) {
      if (s_[p_] == '$' && p_ + 1 == s_.size()) {
        tail = true;
        ++p_;
      } else {
        Fail(s_[p_] == ')' ? "unbalanced ')'" : "unsupported construct");
      }
    }
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    const std::string any =
        absl::StrCat("(", JsonCharClassGbnf(Complement({})), ")*");
    return absl::StrCat(head ? "" : any + " ", "(", body, ")",
                        tail ? "" : " " + any);
  }

 private:
  void Fail(absl::string_view what) {
    if (error_.empty()) {
      error_ = absl::StrCat("pattern: at offset ", p_, ": ", what);
    }
  }

  std::string Alternation(int depth) {
    if (depth > limits_.max_nesting_depth) {
      Fail("nesting too deep");
      return "";
    }
    std::string out = Sequence(depth);
    while (error_.empty() && p_ < s_.size() && s_[p_] == '|') {
      ++p_;
      out = absl::StrCat(out, " | ", Sequence(depth));
    }
    return out;
  }

  std::string Sequence(int depth) {
    std::string out;
    while (error_.empty() && p_ < s_.size()) {
      const char c = s_[p_];
      if (c == '|' || c == ')') break;
      if (c == '$' && p_ + 1 == s_.size()) break;
      std::string atom = Atom(depth);
      if (!error_.empty()) break;
      atom = Quantified(atom);
      out = out.empty() ? atom : absl::StrCat(out, " ", atom);
    }
    return out.empty() ? "\"\"" : out;
  }

  bool Number(int* v) {
    const size_t start = p_;
    int64_t x = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      x = x * 10 + (s_[p_++] - '0');
      if (x > limits_.max_repeat) {
        Fail(absl::StrCat("repetition bound above ", limits_.max_repeat));
        return false;
      }
    }
    *v = static_cast<int>(x);
    return p_ > start;
  }

  std::string Quantified(const std::string& atom) {
    if (p_ >= s_.size()) return atom;
    std::string q;
    const char c = s_[p_];
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++p_;
    } else if (c == '{') {
      const size_t save = p_++;
      int lo = 0, hi = -1;
      if (!Number(&lo)) {
        p_ = save;  // a literal '{'
        return atom;
      }
      hi = lo;
      if (p_ < s_.size() && s_[p_] == ',') {
        ++p_;
        hi = -1;
        if (p_ < s_.size() && s_[p_] != '}' && !Number(&hi)) {
          Fail("bad repetition");
          return atom;
        }
      }
      if (p_ >= s_.size() || s_[p_] != '}' || (hi != -1 && hi < lo)) {
        Fail("bad repetition");
        return atom;
      }
      ++p_;
      q = hi == -1 ? absl::StrCat("{", lo, ",}")
                   : absl::StrCat("{", lo, ",", hi, "}");
    } else {
      return atom;
    }
    if (p_ < s_.size() && s_[p_] == '?') ++p_;  // lazy: same language
    if (p_ < s_.size() && (s_[p_] == '*' || s_[p_] == '+' || s_[p_] == '{')) {
      Fail("nested quantifier");
    }
    return absl::StrCat("(", atom, ")", q);
  }

  std::string Literal(uint32_t c) {
    if (c == '"' || c == '\\' || c < 0x20) return GbnfLiteral(Escaped(c));
    std::string bytes;
    AppendUtf8(c, &bytes);
    return GbnfLiteral(bytes);
  }

  // A class escape (\d \w \s and their negations); false if `c` is none.
  bool ClassEscape(char c, std::vector<CodepointRange>* r) {
    const std::vector<CodepointRange> d = {{'0', '9'}};
    const std::vector<CodepointRange> w = {
        {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const std::vector<CodepointRange> sp = {{'\t', '\r'}, {' ', ' '}};
    const std::vector<CodepointRange>* base = nullptr;
    switch (c) {
      case 'd':
      case 'D':
        base = &d;
        break;
      case 'w':
      case 'W':
        base = &w;
        break;
      case 's':
      case 'S':
        base = &sp;
        break;
      default:
        return false;
    }
    if (c >= 'a') {
      r->insert(r->end(), base->begin(), base->end());
    } else {
      // Negations stay within printable ASCII: Python's \D, \W, \S exclude
      // non-ASCII digits, letters and spaces.
      std::vector<CodepointRange> all = {{0x20, 0x7E}};
      auto inv = Complement(Normalize(*base));
      for (auto [lo, hi] : inv) {
        lo = std::max<uint32_t>(lo, 0x20);
        hi = std::min<uint32_t>(hi, 0x7E);
        if (lo <= hi) r->emplace_back(lo, hi);
      }
    }
    return true;
  }

  // An escaped single character after '\'.
  bool EscapedChar(uint32_t* cp) {
    const char c = s_[p_++];
    switch (c) {
      case 'n':
        *cp = '\n';
        return true;
      case 't':
        *cp = '\t';
        return true;
      case 'r':
        *cp = '\r';
        return true;
      case 'f':
        *cp = '\f';
        return true;
      case 'v':
        *cp = '\v';
        return true;
      case 'u': {
        if (p_ + 4 > s_.size()) break;
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = s_[p_++];
          const int dgt = (h >= '0' && h <= '9')   ? h - '0'
                          : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                   : -1;
          if (dgt < 0) return Fail("bad \\u escape"), false;
          v = v * 16 + dgt;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Fail("surrogate escape"), false;
        *cp = v;
        return true;
      }
      default:
        if (!(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'z') &&
            !(c >= 'A' && c <= 'Z')) {
          *cp = static_cast<uint8_t>(c);
          return true;
        }
    }
    Fail(absl::StrCat("unsupported escape '\\", std::string(1, c), "'"));
    return false;
  }

  bool CodePoint(uint32_t* cp) {
    std::string tmp(s_.substr(p_, 4));
    size_t i = 0;
    if (!DecodeUtf8(tmp, &i, cp)) return Fail("invalid UTF-8"), false;
    p_ += i;
    return true;
  }

  std::string Class() {
    bool negate = false;
    if (p_ < s_.size() && s_[p_] == '^') {
      negate = true;
      ++p_;
    }
    std::vector<CodepointRange> r;
    bool first = true;
    while (error_.empty()) {
      if (p_ >= s_.size()) {
        Fail("unterminated class");
        return "";
      }
      if (s_[p_] == ']' && !first) {
        ++p_;
        break;
      }
      first = false;
      uint32_t lo;
      if (s_[p_] == '\\') {
        ++p_;
        if (p_ >= s_.size()) return Fail("truncated escape"), "";
        if (ClassEscape(s_[p_], &r)) {
          ++p_;
          continue;
        }
        if (!EscapedChar(&lo)) return "";
      } else if (!CodePoint(&lo)) {
        return "";
      }
      uint32_t hi = lo;
      if (p_ + 1 < s_.size() && s_[p_] == '-' && s_[p_ + 1] != ']') {
        ++p_;
        if (s_[p_] == '\\') {
          ++p_;
          if (p_ >= s_.size() || !EscapedChar(&hi))
            return Fail("bad range"), "";
        } else if (!CodePoint(&hi)) {
          return "";
        }
        if (hi < lo) return Fail("range out of order"), "";
      }
      r.emplace_back(lo, hi);
    }
    auto ranges = Normalize(std::move(r));
    if (negate) ranges = Complement(ranges);
    if (ranges.empty()) {
      Fail("class matches nothing");
      return "";
    }
    return JsonCharClassGbnf(ranges);
  }

  std::string Atom(int depth) {
    const char c = s_[p_];
    if (c == '(') {
      ++p_;
      if (s_.substr(p_, 2) == "?:") {
        p_ += 2;
      } else if (p_ < s_.size() && s_[p_] == '?') {
        Fail("lookaround and named groups are not supported");
        return "";
      }
      std::string inner = Alternation(depth + 1);
      if (p_ >= s_.size() || s_[p_] != ')') {
        Fail("missing ')'");
        return "";
      }
      ++p_;
      return absl::StrCat("(", inner, ")");
    }
    if (c == '[') {
      ++p_;
      return Class();
    }
    if (c == '.') {
      ++p_;
      return JsonCharClassGbnf(Complement(Ascii({{'\n', '\n'}})));
    }
    if (c == '\\') {
      ++p_;
      if (p_ >= s_.size()) return Fail("truncated escape"), "";
      std::vector<CodepointRange> r;
      if (ClassEscape(s_[p_], &r)) {
        ++p_;
        return JsonCharClassGbnf(Normalize(std::move(r)));
      }
      uint32_t cp;
      if (s_[p_] >= '1' && s_[p_] <= '9') {
        return Fail("backreferences are not supported"), "";
      }
      if (s_[p_] == 'b' || s_[p_] == 'B') {
        return Fail("word boundaries are not supported"), "";
      }
      if (!EscapedChar(&cp)) return "";
      return Literal(cp);
    }
    if (c == '*' || c == '+' || c == '?') {
      Fail("quantifier without an operand");
      return "";
    }
    if (c == '^' || c == '$') {
      Fail("anchors are supported only at the start and end");
      return "";
    }
    uint32_t cp;
    if (!CodePoint(&cp)) return "";
    return Literal(cp);
  }

  absl::string_view s_;
  const GrammarLimits& limits_;
  size_t p_ = 0;
  std::string error_;
};

}  // namespace

std::string JsonCharClassGbnf(const std::vector<CodepointRange>& ranges) {
  std::vector<CodepointRange> plain;
  std::string specials;
  for (auto [lo, hi] : ranges) {
    for (uint32_t c = lo; c <= hi && c < 0x20; ++c) {
      specials += " | " + GbnfLiteral(Escaped(c));
    }
    if (hi < 0x20) continue;
    lo = std::max<uint32_t>(lo, 0x20);
    // '"' (0x22) and '\' (0x5C) need escapes.
    for (uint32_t special : {0x22u, 0x5Cu}) {
      if (lo <= special && special <= hi) {
        specials += " | " + GbnfLiteral(Escaped(special));
        if (lo < special) plain.emplace_back(lo, special - 1);
        lo = special + 1;
      }
    }
    if (lo <= hi) plain.emplace_back(lo, hi);
  }
  std::string out = plain.empty() ? "" : ClassBody(plain);
  if (specials.empty()) return out;
  if (out.empty()) specials = specials.substr(3);
  return absl::StrCat("(", out, specials, ")");
}

absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern,
                                        const GrammarLimits& limits) {
  return RegexParser(pattern, limits).Parse();
}

}  // namespace ckv::grammar
