// Lexer of the chat-template interpreter: splits Jinja2 template text into
// text, tag delimiters and expression tokens, applying whitespace control as
// transformers configures Jinja2 (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False, "\n" newlines) and the `-`/`+` tag markers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ckv::chat {

enum class TokenType {
  kText,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOperator,  // text holds the operator, e.g. "==", "(", "|"
  kEnd,       // end of the template
};

struct Token {
  TokenType type;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// INVALID_ARGUMENT (with the line) on an unterminated tag, comment or string,
// an unknown character inside a tag, invalid UTF-8, or a number that does not
// fit in int64.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace ckv::chat
