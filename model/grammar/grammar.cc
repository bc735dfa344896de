#include "model/grammar/grammar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckv::grammar {

std::vector<bool> Nullable(const Grammar& g) {
  const size_t n = g.rule_alternatives.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (int32_t start : g.rule_alternatives[r]) {
        int32_t p = start;
        while (g.elements[p] != kEnd && Grammar::IsRef(g.elements[p]) &&
               nullable[g.elements[p]]) {
          ++p;
        }
        if (g.elements[p] == kEnd) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

namespace {

// The rules each rule can begin with (left corners), and per left corner
// the number of alternatives reaching it.
std::vector<std::vector<int32_t>> LeftCorners(const Grammar& g,
                                              const std::vector<bool>& nul) {
  std::vector<std::vector<int32_t>> out(g.rule_alternatives.size());
  for (size_t r = 0; r < out.size(); ++r) {
    for (int32_t p : g.rule_alternatives[r]) {
      for (; g.elements[p] != kEnd; ++p) {
        const int32_t e = g.elements[p];
        if (!Grammar::IsRef(e)) break;
        out[r].push_back(e);
        if (!nul[e]) break;
      }
    }
  }
  return out;
}

}  // namespace

absl::Status CheckGrammar(const Grammar& g, const GrammarLimits& limits) {
  const size_t n = g.rule_alternatives.size();
  for (int32_t e : g.elements) {
    if (Grammar::IsRef(e) && static_cast<size_t>(e) >= n) {
      return absl::InvalidArgumentError("grammar: reference to no rule");
    }
  }
  const std::vector<bool> nul = Nullable(g);
  const auto corners = LeftCorners(g, nul);
  // Iterative DFS over left corners: a back edge is left recursion; the
  // post-order gives each rule's expansion count (terminal-led stacks
  // plus empty completions), capped.
  std::vector<int8_t> color(n, 0);  // 0 new, 1 on stack, 2 done
  std::vector<int64_t> paths(n, 0);
  const int64_t cap = limits.max_expansion_paths + 1;
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{int32_t(start), 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < corners[r].size()) {
        const int32_t c = corners[r][i++];
        if (color[c] == 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "grammar: rule '", g.rule_names[c],
              "' is left-recursive (it can reach itself before any "
              "character); rewrite it with repetition, e.g. x ::= y (\"op\" "
              "y)*"));
        }
        if (color[c] == 0) {
          color[c] = 1;
          stack.push_back({c, 0});
        }
        continue;
      }
      // Every alternative: one stack per terminal-led prefix, plus the
      // expansions of its left-corner references.
      int64_t count = 0;
      for (int32_t p : g.rule_alternatives[r]) {
        for (;; ++p) {
          const int32_t e = g.elements[p];
          if (e == kEnd || !Grammar::IsRef(e)) {
            ++count;
            break;
          }
          count += paths[e];
          if (!nul[e]) break;
        }
        count = std::min(count, cap);
      }
      paths[r] = count;
      if (count > limits.max_expansion_paths) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grammar: rule '", g.rule_names[r], "' expands into more than ",
            limits.max_expansion_paths,
            " alternatives at once (exponential alternation)"));
      }
      color[r] = 2;
      stack.pop_back();
    }
  }
  return absl::OkStatus();
}

}  // namespace ckv::grammar
