// GBNF, llama.cpp's grammar format, parsed and compiled to a Grammar.
//
//   root   ::= object            # a rule per line group; `root` is the start
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws     ::= [ \t\n]*
//
// Terms: "literal" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH),
// [classes] with ranges and ^ negation, `.` (any code point), rule names
// ([A-Za-z0-9_-]+), ( groups ); alternation `|`; postfix * + ? {m} {m,}
// {m,n}. Whitespace (newlines included) and # comments separate terms; a
// rule ends where the next `name ::=` begins.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"
#include "model/grammar/utf8_ranges.h"

namespace ckv::grammar {

// The syntax tree of one expression.
struct Expr {
  enum Kind { kAlt, kSeq, kLiteral, kClass, kRef, kRepeat };
  Kind kind = kSeq;
  std::vector<Expr> children;          // kAlt, kSeq; kRepeat: one
  std::vector<CodepointRange> ranges;  // kClass (normalized, negation done)
  std::string text;                    // kLiteral: bytes; kRef: rule name
  int min = 0, max = -1;               // kRepeat; max -1: unbounded
};

struct GbnfRule {
  std::string name;
  Expr body;
};

// INVALID_ARGUMENT "grammar: line L, column C: ..." on a syntax error or a
// limit exceeded (source size, nesting, repeat bounds).
absl::StatusOr<std::vector<GbnfRule>> ParseGbnf(absl::string_view text,
                                                const GrammarLimits& limits);

// Lowers parsed rules (start rule `root_name`) and checks the result
// (CheckGrammar): undefined rules, left recursion, limits.
absl::StatusOr<Grammar> LowerGbnf(const std::vector<GbnfRule>& rules,
                                  absl::string_view root_name,
                                  const GrammarLimits& limits);

// ParseGbnf + LowerGbnf with start rule "root".
absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(
    absl::string_view text, const GrammarLimits& limits = {});

}  // namespace ckv::grammar
