// Syntax tree -> flat byte-level Grammar (gbnf.h).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "model/grammar/gbnf.h"

namespace ckv::grammar {
namespace {

using Alternative = std::vector<int32_t>;

class Lowerer {
 public:
  explicit Lowerer(const GrammarLimits& limits) : limits_(limits) {}

  absl::StatusOr<Grammar> Lower(const std::vector<GbnfRule>& rules,
                                absl::string_view root_name) {
    for (const GbnfRule& r : rules) {
      const int32_t id = RuleId(r.name);
      if (defined_[id]) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: rule '", r.name, "' is defined twice"));
      }
      defined_[id] = true;
    }
    for (const GbnfRule& r : rules) {
      bodies_[RuleId(r.name)] = Alternatives(r.body);
      if (!error_.empty()) return absl::InvalidArgumentError(error_);
    }
    for (size_t i = 0; i < defined_.size(); ++i) {
      if (!defined_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grammar: rule '", g_.rule_names[i], "' is used but not defined"));
      }
    }
    auto root = ids_.find(std::string(root_name));
    if (root == ids_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: no '", root_name, "' rule"));
    }
    g_.root = root->second;
    // Flatten: every alternative followed by kEnd.
    g_.rule_alternatives.resize(bodies_.size());
    for (size_t r = 0; r < bodies_.size(); ++r) {
      for (const Alternative& alt : bodies_[r]) {
        g_.rule_alternatives[r].push_back(
            static_cast<int32_t>(g_.elements.size()));
        g_.elements.insert(g_.elements.end(), alt.begin(), alt.end());
        g_.elements.push_back(kEnd);
      }
    }
    if (g_.elements.size() > static_cast<size_t>(limits_.max_elements)) {
      return TooBig();
    }
    AddChainStars();
    if (auto s = CheckGrammar(g_, limits_); !s.ok()) return s;
    return std::move(g_);
  }

 private:
  absl::Status TooBig() {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: more than ", limits_.max_rules, " rules or ",
                     limits_.max_elements, " elements after expansion"));
  }

  bool Grow(size_t elements) {
    total_elements_ += elements;
    if (g_.rule_names.size() > static_cast<size_t>(limits_.max_rules) ||
        total_elements_ > static_cast<size_t>(limits_.max_elements)) {
      if (error_.empty()) error_ = std::string(TooBig().message());
      return false;
    }
    return true;
  }

  int32_t RuleId(const std::string& name) {
    auto [it, inserted] =
        ids_.try_emplace(name, static_cast<int32_t>(g_.rule_names.size()));
    if (inserted) {
      g_.rule_names.push_back(name);
      defined_.push_back(false);
      bodies_.emplace_back();
      Grow(0);
    }
    return it->second;
  }

  int32_t NewRule(std::vector<Alternative> alts) {
    const int32_t id = static_cast<int32_t>(g_.rule_names.size());
    g_.rule_names.push_back(absl::StrCat("_", id));
    defined_.push_back(true);
    size_t n = 0;
    for (const auto& a : alts) n += a.size() + 1;
    bodies_.push_back(std::move(alts));
    Grow(n);
    return id;
  }

  int32_t ByteSet(uint8_t lo, uint8_t hi) {
    std::array<uint64_t, 4> bits{};
    for (int b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
    return ByteSet(bits);
  }

  int32_t ByteSet(const std::array<uint64_t, 4>& bits) {
    auto [it, inserted] = byte_set_ids_.try_emplace(
        bits, static_cast<int32_t>(g_.byte_sets.size()));
    if (inserted) g_.byte_sets.push_back(bits);
    return -2 - it->second;
  }

  // A class: one byte set when it is all ASCII, else a rule of UTF-8 byte
  // sequences (shared between equal classes).
  void Class(const std::vector<CodepointRange>& ranges, Alternative* out) {
    if (ranges.empty()) {
      error_ = "grammar: empty character class matches nothing";
      return;
    }
    auto cached = class_rules_.find(ranges);
    if (cached != class_rules_.end()) {
      out->push_back(cached->second);
      return;
    }
    std::vector<ByteRangeSeq> seqs;
    ToUtf8Sequences(ranges, &seqs);
    std::array<uint64_t, 4> single{};
    std::vector<Alternative> alts;
    for (const ByteRangeSeq& seq : seqs) {
      if (seq.size() == 1) {
        for (int b = seq[0].first; b <= seq[0].second; ++b) {
          single[b >> 6] |= uint64_t{1} << (b & 63);
        }
        continue;
      }
      Alternative alt;
      for (auto [lo, hi] : seq) alt.push_back(ByteSet(lo, hi));
      alts.push_back(std::move(alt));
    }
    const bool has_single = single[0] | single[1] | single[2] | single[3];
    if (alts.empty()) {
      out->push_back(ByteSet(single));
      return;
    }
    if (has_single) alts.insert(alts.begin(), Alternative{ByteSet(single)});
    const int32_t rule = NewRule(std::move(alts));
    class_rules_.emplace(ranges, rule);
    out->push_back(rule);
  }

  std::vector<Alternative> Alternatives(const Expr& e) {
    std::vector<Alternative> alts;
    if (e.kind == Expr::kAlt) {
      for (const Expr& c : e.children) {
        alts.emplace_back();
        Sequence(c, &alts.back());
      }
    } else {
      alts.emplace_back();
      Sequence(e, &alts.back());
    }
    return alts;
  }

  void Sequence(const Expr& e, Alternative* out) {
    if (e.kind == Expr::kSeq) {
      for (const Expr& c : e.children) Item(c, out);
    } else {
      Item(e, out);
    }
  }

  void Item(const Expr& e, Alternative* out) {
    if (!error_.empty() || !Grow(1)) return;
    switch (e.kind) {
      case Expr::kLiteral:
        for (unsigned char b : e.text) out->push_back(ByteSet(b, b));
        Grow(e.text.size());
        break;
      case Expr::kClass:
        Class(e.ranges, out);
        break;
      case Expr::kRef:
        out->push_back(RuleId(e.text));
        break;
      case Expr::kSeq:
        Sequence(e, out);
        break;
      case Expr::kAlt:
        out->push_back(NewRule(Alternatives(e)));
        break;
      case Expr::kRepeat:
        Repeat(e, out);
        break;
    }
  }

  // x{m,n}: m copies of x, then n - m nested optionals (or x* when
  // unbounded) as right-recursive rules.
  void Repeat(const Expr& e, Alternative* out) {
    Alternative body;
    Sequence(e.children[0], &body);
    if (!error_.empty()) return;
    for (int i = 0; i < e.min && Grow(body.size()); ++i) {
      out->insert(out->end(), body.begin(), body.end());
    }
    if (e.max == -1) {
      const int32_t star = NewRule({});
      Alternative loop = body;
      loop.push_back(star);
      bodies_[star] = {std::move(loop), {}};
      Grow(body.size() + 3);
      out->push_back(star);
      return;
    }
    int32_t next = -1;  // the optional tail, built from the end
    RepeatChain chain;
    chain.body_size = static_cast<int32_t>(body.size());
    // rep_1 ::= x empty | "": x never ends an alternative, so every
    // rep_k keeps a stack entry while x is matched (MaskIndex folds by it).
    if (empty_ < 0) empty_ = NewRule({{}});
    for (int i = e.max - e.min; i > 0 && error_.empty(); --i) {
      Alternative some = body;
      some.push_back(next >= 0 ? next : empty_);
      next = NewRule({std::move(some), {}});
      chain.rules.push_back(next);  // allows rules.size() more copies
    }
    if (next < 0) return;
    out->push_back(next);
    if (error_.empty()) chains_.push_back({std::move(chain), std::move(body)});
  }

  // After flattening, for each chain whose x cannot match "" (x* would
  // otherwise be left recursive): x* ::= x x* | "" with the same body,
  // referenced by no rule, onto which MaskIndex folds the chain's states
  // (grammar.h, RepeatChain). A star that would cross a limit is left
  // out (no new error).
  void AddChainStars() {
    const std::vector<bool> nullable = Nullable(g_);
    for (auto& [chain, body] : chains_) {
      const bool body_nullable = std::all_of(
          body.begin(), body.end(),
          [&](int32_t e) { return Grammar::IsRef(e) && nullable[e]; });
      if (body_nullable ||
          g_.rule_names.size() + 1 > static_cast<size_t>(limits_.max_rules) ||
          g_.elements.size() + body.size() + 3 >
              static_cast<size_t>(limits_.max_elements)) {
        continue;
      }
      chain.star = static_cast<int32_t>(g_.rule_names.size());
      g_.rule_names.push_back(absl::StrCat("_", chain.star));
      const int32_t alt = static_cast<int32_t>(g_.elements.size());
      g_.elements.insert(g_.elements.end(), body.begin(), body.end());
      g_.elements.push_back(chain.star);
      g_.elements.push_back(kEnd);
      g_.elements.push_back(kEnd);  // the empty alternative
      g_.rule_alternatives.push_back(
          {alt, alt + static_cast<int32_t>(body.size()) + 2});
      g_.repeat_chains.push_back(std::move(chain));
    }
  }

  const GrammarLimits& limits_;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<std::vector<Alternative>> bodies_;
  std::vector<std::pair<RepeatChain, Alternative>> chains_;  // and x
  int32_t empty_ = -1;  // the rule "" (rep_1's tail)
  absl::flat_hash_map<std::array<uint64_t, 4>, int32_t> byte_set_ids_;
  std::map<std::vector<CodepointRange>, int32_t> class_rules_;
  size_t total_elements_ = 0;
  std::string error_;
};

}  // namespace

absl::StatusOr<Grammar> LowerGbnf(const std::vector<GbnfRule>& rules,
                                  absl::string_view root_name,
                                  const GrammarLimits& limits) {
  return Lowerer(limits).Lower(rules, root_name);
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(
    absl::string_view text, const GrammarLimits& limits) {
  auto rules = ParseGbnf(text, limits);
  if (!rules.ok()) return rules.status();
  auto g = LowerGbnf(*rules, "root", limits);
  if (!g.ok()) return g.status();
  return std::make_shared<const Grammar>(*std::move(g));
}

}  // namespace ckv::grammar
