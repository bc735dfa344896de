#include "model/chat/lexer.h"
#include "model/chat/text.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace ckv::chat {
namespace {

using tokenizer_internal::AppendUtf8;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

// Python's "unicode-escape" decoding of a string literal's body, as Jinja
// applies it: \n, \t, \xhh, \uXXXX, \ooo, ...; unknown escapes stay as written.
absl::StatusOr<std::string> Unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n':
        break;  // line continuation
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (i + len >= body.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": truncated \\", std::string(1, c),
                           " escape in a string"));
        }
        uint32_t cp = 0;
        for (size_t k = 1; k <= len; ++k) {
          const char h = body[i + k];
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) {
            return absl::InvalidArgumentError(absl::StrCat(
                "line ", line, ": bad \\", std::string(1, c), " escape"));
          }
          cp = cp * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": escape outside Unicode"));
        }
        AppendUtf8(cp, &out);
        i += len;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' &&
                 body[i + k] <= '7') {
            cp = cp * 8 + (body[i + k] - '0');
            ++k;
          }
          AppendUtf8(cp, &out);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = FindTag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        Emit(TokenType::kText, std::move(text));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      ApplyLeftControl(kind, sign, line_starting, &text);
      line_ += CountLines(src_.substr(pos_, tag - pos_));
      Emit(TokenType::kText, std::move(text));
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      absl::Status s = kind == '#' ? SkipComment() : LexTag(kind == '%');
      if (!s.ok()) return s;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::kEnd, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  static int CountLines(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  // Start of the next "{{", "{%" or "{#" at or after `from`, else size.
  size_t FindTag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos;
         i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() &&
          (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks
  // removes spaces and tabs between a line start and a block or comment tag.
  static void ApplyLeftControl(char kind, char sign, bool line_starting,
                               std::string* text) {
    if (sign == '-') {
      size_t end = text->size();
      while (end > 0 && IsSpace((*text)[end - 1])) --end;
      text->resize(end);
      return;
    }
    if (sign == '+' || kind == '{') return;
    const size_t nl = text->rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    if (l_pos == text->size()) return;
    for (size_t i = l_pos; i < text->size(); ++i) {
      if (!IsSpace((*text)[i])) return;
    }
    text->resize(l_pos);
  }

  void Emit(TokenType type, std::string text) {
    if (type == TokenType::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), 0, 0, line_});
  }

  // After a tag: `-` eats all following whitespace; trim_blocks eats one
  // newline after a block or comment tag unless it ends with `+`.
  void ApplyRightControl(char sign, bool is_block_or_comment) {
    if (sign == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
    } else if (sign != '+' && is_block_or_comment && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++line_;
      ++pos_;
    }
  }

  absl::Status SkipComment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_, ": unterminated comment"));
    }
    const char sign = end > pos_ ? src_[end - 1] : '\0';
    line_ += CountLines(src_.substr(pos_, end - pos_));
    pos_ = end + 2;
    ApplyRightControl(sign == '-' ? '-' : '\0', true);
    return absl::OkStatus();
  }

  absl::Status LexTag(bool block) {
    Emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, "x");
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_, ": unexpected end of template inside a tag"));
      }
      if (depth == 0 && EndsTag(block)) return absl::OkStatus();
      auto s = LexOne(&depth);
      if (!s.ok()) return s;
    }
  }

  bool EndsTag(bool block) {
    const std::string_view rest = std::string_view(src_).substr(pos_);
    const char close = block ? '%' : '}';
    char sign = '\0';
    size_t len = 2;
    if (rest.size() >= 3 && (rest[0] == '-' || (block && rest[0] == '+')) &&
        rest[1] == close && rest[2] == '}') {
      sign = rest[0];
      len = 3;
    } else if (!(rest.size() >= 2 && rest[0] == close && rest[1] == '}')) {
      return false;
    }
    pos_ += len;
    Emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, "x");
    ApplyRightControl(sign, block);
    return true;
  }

  absl::Status LexOne(int* depth) {
    const char c = src_[pos_];
    if (c == '\'' || c == '"') return LexString(c);
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) return LexNumber();
    if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < src_.size() &&
             (absl::ascii_isalnum(static_cast<unsigned char>(src_[end])) ||
              src_[end] == '_')) {
        ++end;
      }
      Emit(TokenType::kName, src_.substr(pos_, end - pos_));
      pos_ = end;
      return absl::OkStatus();
    }
    static constexpr std::string_view kTwo[] = {
        "//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        Emit(TokenType::kOperator, std::string(op));
        pos_ += 2;
        return absl::OkStatus();
      }
    }
    if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) ==
        std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_, ": unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++*depth;
    if (c == ')' || c == ']' || c == '}') {
      if (*depth == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_, ": unexpected '", std::string(1, c), "'"));
      }
      --*depth;
    }
    Emit(TokenType::kOperator, std::string(1, c));
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status LexString(char quote) {
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_, ": unterminated string"));
    }
    const int line = line_;
    const std::string_view body =
        std::string_view(src_).substr(pos_ + 1, i - pos_ - 1);
    line_ += CountLines(body);
    auto value = Unescape(body, line);
    if (!value.ok()) return value.status();
    tokens_.push_back(Token{TokenType::kString, *std::move(value), 0, 0, line});
    pos_ = i + 1;
    return absl::OkStatus();
  }

  absl::Status LexNumber() {
    std::string digits;
    size_t i = pos_;
    const auto take_digits = [&] {
      while (i < src_.size() &&
             (absl::ascii_isdigit(static_cast<unsigned char>(src_[i])) ||
              (src_[i] == '_' && i + 1 < src_.size() &&
               absl::ascii_isdigit(static_cast<unsigned char>(src_[i + 1]))))) {
        if (src_[i] != '_') digits += src_[i];
        ++i;
      }
    };
    take_digits();
    bool is_float = false;
    if (i + 1 < src_.size() && src_[i] == '.' &&
        absl::ascii_isdigit(static_cast<unsigned char>(src_[i + 1]))) {
      is_float = true;
      digits += src_[i++];
      take_digits();
    }
    if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() &&
          absl::ascii_isdigit(static_cast<unsigned char>(src_[j]))) {
        is_float = true;
        digits += 'e';
        digits += src_.substr(i + 1, j - i - 1);
        i = j;
        take_digits();
      }
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, digits, 0, 0,
            line_};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      errno = 0;
      char* end = nullptr;
      t.int_value = std::strtoll(digits.c_str(), &end, 10);
      if (errno == ERANGE) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_, ": integer too large: ", digits));
      }
    }
    tokens_.push_back(std::move(t));
    pos_ = i;
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// "\r\n" and "\r" become "\n"; one trailing newline is dropped.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  const size_t bad = tokenizer_internal::FirstInvalidUtf8(AV(source));
  if (bad != source.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("template is not valid UTF-8 (byte ", bad, ")"));
  }
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace ckv::chat
