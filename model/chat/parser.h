// Parser of the chat-template interpreter: tokens (lexer.h) -> syntax tree
// (ast.h), following Jinja2's grammar and operator precedence for the
// subset chat templates use: if/elif/else, for (tuple targets, `if` filter,
// else), set (names, tuples, namespace attributes, blocks), macro, break,
// continue, generation; literals, lists, tuples, dicts, attribute/item
// access, slices, calls with keyword arguments, filters, tests, `in`,
// `not in`, chained comparisons, arithmetic, `~`, `and`/`or`/`not`, and
// `a if b else c`.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/lexer.h"

namespace ckv::chat {

// INVALID_ARGUMENT (with the line) on a syntax error, an unknown filter or
// test, an unsupported tag (include, extends, call, raw, ...), or nesting
// deeper than `max_nesting` (expression tree height or block depth).
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens, int max_nesting);

}  // namespace ckv::chat
