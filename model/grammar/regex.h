// A regular expression (the JSON Schema `pattern` subset: literals,
// escapes \d \w \s \D \W \S \n \t \r \uXXXX and escaped punctuation, `.`,
// classes with ranges and negation, groups ( ) and (?: ), alternation,
// quantifiers * + ? {m} {m,} {m,n} (a trailing lazy `?` is ignored), `^`
// at the start and `$` at the end) as a GBNF expression over the
// JSON-escaped text of a string value (without its quotes). Unanchored
// ends match any text, as JSON Schema's search semantics say.
// Backreferences, lookaround and other constructs are INVALID_ARGUMENT.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"

namespace ckv::grammar {

absl::StatusOr<std::string> RegexToGbnf(absl::string_view pattern,
                                        const GrammarLimits& limits);

// The GBNF of one JSON-string character in code point class `ranges`
// (normalized), escaped as JSON requires.
std::string JsonCharClassGbnf(
    const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace ckv::grammar
