// A context-free grammar over bytes, the compiled form of GBNF text (and of
// JSON Schema, which is converted to GBNF first). Every rule is a list of
// alternatives; an alternative is a sequence of elements, each a byte set
// or a reference to a rule. Character classes over Unicode code points are
// lowered to UTF-8 byte sequences, so recognition works on bytes and a token
// may end in the middle of a code point.
//
// Layout: all alternatives live in one flat element array; each ends with
// kEnd. A position is an index into that array.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ckv::grammar {

// The bounds every compile (GBNF, JSON Schema, regex) and every recogniser
// runs under; a grammar beyond them is INVALID_ARGUMENT naming the limit.
// Defaults keep one compile under ~50 ms and ~64 MiB.
struct GrammarLimits {
  size_t max_source_bytes = 256 << 10;  // GBNF / schema / pattern text
  int max_nesting_depth = 64;           // parentheses, schema nesting
  int max_rules = 20000;                // after lowering
  int max_elements = 400000;            // flat element array
  int max_repeat = 1000;                // m and n of {m,n}
  int max_enum_values = 4096;           // JSON Schema enum entries
  // Distinct left-corner paths from one rule (how many stacks one
  // expansion can make): an exponential alternation is rejected above it.
  int64_t max_expansion_paths = 100000;
  // Recogniser: stacks alive in one state; beyond it the state is dead.
  int max_stacks = 4096;
  // Recogniser memory: interned stack nodes and cached states; beyond
  // them the caches are rebuilt from the current state (bounded memory).
  int max_stack_nodes = 1 << 20;
  int max_states = 8192;
  int mask_cache_entries = 64;  // cached token masks per matcher
  // Context-independent masks shared by a constraint's matchers
  // (mask_index.h); 0 turns that path off.
  int64_t mask_index_bytes = 32 << 20;
  // MaskIndex folds the count states of x{m,n} onto one walk (off: one
  // walk per count, as before; for measurements and tests).
  bool fold_repeats = true;

  bool operator==(const GrammarLimits&) const = default;
};

inline constexpr int32_t kEnd = -1;  // element: end of an alternative

// x{m,n} with n > m is lowered to m copies of x and a chain of rules
// rep_k ::= x rep_(k-1) | "" (rep_1 ::= x empty | "", empty ::= ""),
// rep_k allowing k more copies; the lowering also adds star ::= x star |
// "" (when x cannot match ""), referenced by no rule, so that MaskIndex
// can fold the states of the chain onto it.
struct RepeatChain {
  std::vector<int32_t> rules;  // rules[k - 1] = rep_k
  int32_t star = -1;
  int32_t body_size = 0;  // elements of x at the start of each first
                          // alternative (rep_k's and star's)
};

struct Grammar {
  // element >= 0: reference to rule `element`; kEnd; <= -2: byte set
  // number (-2 - element).
  std::vector<int32_t> elements;
  std::vector<std::vector<int32_t>> rule_alternatives;  // start positions
  std::vector<std::string> rule_names;
  std::vector<std::array<uint64_t, 4>> byte_sets;
  int32_t root = 0;
  std::vector<RepeatChain> repeat_chains;

  static bool IsRef(int32_t e) { return e >= 0; }
  static bool IsBytes(int32_t e) { return e <= -2; }
  static int32_t SetOf(int32_t e) { return -2 - e; }
  bool Matches(int32_t element, uint8_t byte) const {
    const auto& s = byte_sets[SetOf(element)];
    return (s[byte >> 6] >> (byte & 63)) & 1;
  }
};

// Per rule: it can derive the empty string (fixpoint).
std::vector<bool> Nullable(const Grammar& g);

// Checks the grammar's structure after lowering: every reference names a
// rule, no rule is left-recursive (directly or through nullable
// prefixes), and no rule expands into more than
// limits.max_expansion_paths stacks. INVALID_ARGUMENT names the rule.
absl::Status CheckGrammar(const Grammar& g, const GrammarLimits& limits);

}  // namespace ckv::grammar
