// GBNF text -> syntax tree (gbnf.h).
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/grammar/gbnf.h"

namespace ckv::grammar {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class Parser {
 public:
  Parser(absl::string_view text, const GrammarLimits& limits)
      : s_(text), limits_(limits) {}

  absl::StatusOr<std::vector<GbnfRule>> Parse() {
    if (s_.size() > limits_.max_source_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: ", s_.size(),
                                                     " bytes; the limit is ",
                                                     limits_.max_source_bytes));
    }
    std::vector<GbnfRule> rules;
    SkipSpace();
    while (p_ < s_.size() && error_.empty()) {
      GbnfRule rule;
      rule.name = Name();
      if (rule.name.empty()) {
        Fail("expected a rule name");
        break;
      }
      SkipSpace();
      if (s_.substr(p_, 3) != "::=") {
        Fail(absl::StrCat("expected '::=' after rule name '", rule.name, "'"));
        break;
      }
      p_ += 3;
      SkipSpace();
      rule.body = Alternation(0);
      if (!error_.empty()) break;
      rules.push_back(std::move(rule));
      SkipSpace();
    }
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    if (rules.empty()) {
      return absl::InvalidArgumentError("grammar: no rules");
    }
    return rules;
  }

 private:
  void Fail(absl::string_view what) {
    if (!error_.empty()) return;
    int line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    error_ = absl::StrCat("grammar: line ", line, ", column ", col, ": ", what);
  }

  void SkipSpace() {
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p_;
      } else if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n') ++p_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t start = p_;
    while (p_ < s_.size() && IsNameChar(s_[p_])) ++p_;
    return std::string(s_.substr(start, p_ - start));
  }

  // True when the text at p_ is `name ws ::=` (the next rule begins).
  bool AtRuleStart() const {
    size_t q = p_;
    while (q < s_.size() && IsNameChar(s_[q])) ++q;
    if (q == p_) return false;
    while (q < s_.size() &&
           (s_[q] == ' ' || s_[q] == '\t' || s_[q] == '\n' || s_[q] == '\r')) {
      ++q;
    }
    return s_.substr(q, 3) == "::=";
  }

  Expr Alternation(int depth) {
    Expr alt;
    alt.kind = Expr::kAlt;
    if (depth > limits_.max_nesting_depth) {
      Fail(absl::StrCat("nesting deeper than ", limits_.max_nesting_depth));
      return alt;
    }
    alt.children.push_back(Sequence(depth));
    while (error_.empty() && p_ < s_.size() && s_[p_] == '|') {
      ++p_;
      SkipSpace();
      alt.children.push_back(Sequence(depth));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Expr Sequence(int depth) {
    Expr seq;
    seq.kind = Expr::kSeq;
    while (error_.empty() && p_ < s_.size()) {
      const char c = s_[p_];
      if (c == '|' || c == ')' || AtRuleStart()) break;
      Expr item = Primary(depth);
      if (!error_.empty()) break;
      SkipSpace();
      Postfix(&item);
      seq.children.push_back(std::move(item));
      SkipSpace();
    }
    return seq;
  }

  void Postfix(Expr* item) {
    while (error_.empty() && p_ < s_.size()) {
      const char c = s_[p_];
      int lo, hi;
      if (c == '*') {
        lo = 0, hi = -1, ++p_;
      } else if (c == '+') {
        lo = 1, hi = -1, ++p_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++p_;
      } else if (c == '{') {
        ++p_;
        if (!Bounds(&lo, &hi)) return;
      } else {
        return;
      }
      Expr rep;
      rep.kind = Expr::kRepeat;
      rep.min = lo;
      rep.max = hi;
      rep.children.push_back(std::move(*item));
      *item = std::move(rep);
      SkipSpace();
    }
  }

  bool Int(int* v) {
    SkipSpace();
    const size_t start = p_;
    int64_t x = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      x = x * 10 + (s_[p_] - '0');
      if (x > limits_.max_repeat) {
        Fail(absl::StrCat("repetition bound above ", limits_.max_repeat));
        return false;
      }
      ++p_;
    }
    *v = static_cast<int>(x);
    SkipSpace();
    return p_ > start || (Fail("expected a number"), false);
  }

  // After '{': m}, m,}, m,n}.
  bool Bounds(int* lo, int* hi) {
    if (!Int(lo)) return false;
    *hi = *lo;
    if (p_ < s_.size() && s_[p_] == ',') {
      ++p_;
      SkipSpace();
      *hi = -1;
      if (p_ < s_.size() && s_[p_] != '}' && !Int(hi)) return false;
    }
    if (p_ >= s_.size() || s_[p_] != '}') {
      Fail("expected '}' closing a repetition");
      return false;
    }
    ++p_;
    if (*hi != -1 && *hi < *lo) {
      Fail(absl::StrCat("repetition {", *lo, ",", *hi, "} has max < min"));
      return false;
    }
    return true;
  }

  Expr Primary(int depth) {
    Expr e;
    const char c = s_[p_];
    if (c == '"') {
      ++p_;
      e.kind = Expr::kLiteral;
      while (error_.empty()) {
        if (p_ >= s_.size()) {
          Fail("unterminated string literal");
          break;
        }
        if (s_[p_] == '"') {
          ++p_;
          break;
        }
        uint32_t cp;
        if (!Char(&cp)) break;
        AppendUtf8(cp, &e.text);
      }
    } else if (c == '[') {
      ++p_;
      Class(&e);
    } else if (c == '.') {
      ++p_;
      e.kind = Expr::kClass;
      e.ranges = Normalize({{0, kMaxCodepoint}});
    } else if (c == '(') {
      ++p_;
      SkipSpace();
      e = Alternation(depth + 1);
      if (error_.empty() && (p_ >= s_.size() || s_[p_] != ')')) {
        Fail("expected ')'");
      }
      ++p_;
      // A group stays a group: (a b)* repeats the whole sequence.
      if (e.kind != Expr::kAlt && e.kind != Expr::kSeq) {
        Expr seq;
        seq.kind = Expr::kSeq;
        seq.children.push_back(std::move(e));
        e = std::move(seq);
      }
    } else if (IsNameChar(c)) {
      e.kind = Expr::kRef;
      e.text = Name();
    } else {
      Fail(absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    return e;
  }

  void Class(Expr* e) {
    e->kind = Expr::kClass;
    bool negate = false;
    if (p_ < s_.size() && s_[p_] == '^') {
      negate = true;
      ++p_;
    }
    std::vector<CodepointRange> ranges;
    while (error_.empty()) {
      if (p_ >= s_.size()) {
        Fail("unterminated character class");
        return;
      }
      if (s_[p_] == ']') {
        ++p_;
        break;
      }
      uint32_t lo, hi;
      if (!Char(&lo)) return;
      hi = lo;
      if (p_ + 1 < s_.size() && s_[p_] == '-' && s_[p_ + 1] != ']') {
        ++p_;
        if (!Char(&hi)) return;
        if (hi < lo) {
          Fail("character range with end before start");
          return;
        }
      }
      ranges.emplace_back(lo, hi);
    }
    e->ranges = Normalize(std::move(ranges));
    if (negate) e->ranges = Complement(e->ranges);
  }

  bool Hex(int digits, uint32_t* cp) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++p_) {
      if (p_ >= s_.size()) return Fail("truncated escape"), false;
      const char h = s_[p_];
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return Fail("bad hex digit in escape"), false;
      v = v * 16 + d;
    }
    if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) {
      return Fail("escape is not a Unicode scalar value"), false;
    }
    *cp = v;
    return true;
  }

  // One (possibly escaped) character of a literal or class.
  bool Char(uint32_t* cp) {
    if (s_[p_] != '\\') {
      std::string tmp(s_.substr(p_, 4));
      size_t i = 0;
      if (!DecodeUtf8(tmp, &i, cp)) return Fail("invalid UTF-8"), false;
      p_ += i;
      return true;
    }
    ++p_;
    if (p_ >= s_.size()) return Fail("truncated escape"), false;
    const char c = s_[p_++];
    switch (c) {
      case 'n':
        *cp = '\n';
        return true;
      case 'r':
        *cp = '\r';
        return true;
      case 't':
        *cp = '\t';
        return true;
      case '0':
        *cp = 0;
        return true;
      case 'x':
        return Hex(2, cp);
      case 'u':
        return Hex(4, cp);
      case 'U':
        return Hex(8, cp);
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
        *cp = static_cast<uint8_t>(c);
        return true;
      default:
        --p_;
        return Fail(absl::StrCat("unknown escape '\\", std::string(1, c), "'")),
               false;
    }
  }

  absl::string_view s_;
  const GrammarLimits& limits_;
  size_t p_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<std::vector<GbnfRule>> ParseGbnf(absl::string_view text,
                                                const GrammarLimits& limits) {
  return Parser(text, limits).Parse();
}

}  // namespace ckv::grammar
