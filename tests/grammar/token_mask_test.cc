// Token masks against a brute-force check of every vocabulary entry with
// the reference recogniser, on random grammar states.
#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/grammar/reference_recognizer.h"
#include "tests/grammar/test_vocab.h"

namespace ckv::grammar {
namespace {

bool Bit(const std::vector<uint64_t>& m, int32_t t) {
  return (m[t >> 6] >> (t & 63)) & 1;
}

std::shared_ptr<const TokenConstraint> Bind(
    const ConstraintSpec& spec, std::shared_ptr<const TokenIndex> vocab) {
  auto c = CompileConstraint(spec, std::move(vocab));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

// Walks `steps` random allowed tokens (after `prefix`, which must be
// accepted); at every state compares the mask with the reference run of
// each token's bytes.
void CheckRandomWalks(const std::shared_ptr<const TokenConstraint>& c,
                      int walks, int steps, uint32_t seed,
                      const std::string& prefix = "") {
  const TokenIndex& v = *c->vocab;
  std::mt19937 rng(seed);
  std::vector<int32_t> sorted;  // text tokens by their bytes
  for (int32_t t = 0; t < v.vocab_size(); ++t) {
    if (!v.IsEog(t) && !v.bytes(t).empty()) sorted.push_back(t);
  }
  std::sort(sorted.begin(), sorted.end(),
            [&](int32_t a, int32_t b) { return v.bytes(a) < v.bytes(b); });
  int checked = 0, allowed_total = 0;
  for (int w = 0; w < walks; ++w) {
    Matcher m(c);
    ReferenceRecognizer ref(*c->grammar);
    ASSERT_TRUE(m.AcceptBytes(prefix)) << prefix;
    for (unsigned char b : prefix) ASSERT_TRUE(ref.Feed(b));
    for (int step = 0; step < steps; ++step) {
      const std::vector<uint64_t> mask = m.Mask();
      // Every token's bytes through the reference, in sorted order so that
      // a prefix shared with the previous token is fed once (`path`: the
      // reference after each byte of the previous token while alive).
      std::vector<bool> accepted(v.vocab_size(), false);
      std::vector<ReferenceRecognizer> path{ref};
      const std::string* prev = nullptr;
      for (int32_t t : sorted) {
        const std::string& bytes = v.bytes(t);
        size_t common = 0;
        while (prev != nullptr && common < bytes.size() &&
               common < prev->size() && bytes[common] == (*prev)[common]) {
          ++common;
        }
        while (path.size() > common + 1) path.pop_back();
        for (size_t k = path.size() - 1; k < bytes.size(); ++k) {
          ReferenceRecognizer next = path.back();
          if (!next.Feed(static_cast<uint8_t>(bytes[k]))) break;
          path.push_back(std::move(next));
        }
        accepted[t] = path.size() == bytes.size() + 1;
        prev = &bytes;
      }
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < v.vocab_size(); ++t) {
        bool want;
        if (v.IsEog(t)) {
          want = ref.Accepting() || !ref.CanContinue();
        } else {
          want = accepted[t];
        }
        ASSERT_EQ(Bit(mask, t), want) << "token " << t << " '" << v.bytes(t)
                                      << "' walk " << w << " step " << step;
        if (want && !v.IsEog(t)) allowed.push_back(t);
      }
      ++checked;
      allowed_total += static_cast<int>(allowed.size());
      EXPECT_EQ(m.Finished(), ref.Accepting() && !ref.CanContinue());
      if (allowed.empty()) break;
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.Accept(t).ok());
      for (unsigned char b : v.bytes(t)) ref.Feed(b);
    }
  }
  EXPECT_GT(checked, walks);
  EXPECT_GT(allowed_total, checked);  // the walks were not trivial
}

const char* kUtf8Grammar = R"(
  root ::= ( word " " )* word "."
  word ::= [a-z\u00e0-\u00ff\u03b1-\u03c9\u20ac]+ | "\"" [^"]{0,5} "\""
)";

TEST(TokenMask, SyntheticVocabularyEqualsBruteForce) {
  auto vocab = testing::SyntheticIndex(400, 3);
  CheckRandomWalks(Bind({ConstraintSpec::kGbnf, kUtf8Grammar}, vocab), 4, 20,
                   1);
  CheckRandomWalks(Bind({ConstraintSpec::kJsonObject, ""}, vocab), 3, 12, 2);
}

TEST(TokenMask, DemoVocabularyEqualsBruteForce) {
  auto tok = testing::DemoTokenizer();
  ASSERT_NE(tok, nullptr) << "models/kjv-llama.gguf is missing";
  auto vocab = TokenIndex::For(*tok);
  EXPECT_EQ(vocab, TokenIndex::For(*tok));  // cached
  CheckRandomWalks(Bind({ConstraintSpec::kJsonObject, ""}, vocab), 1, 10, 4);
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},
      "age":{"type":"integer","minimum":0,"maximum":150},
      "tags":{"type":"array","items":{"enum":["a","bc",null]},"maxItems":3}},
      "required":["name"],"additionalProperties":false})";
  CheckRandomWalks(Bind({ConstraintSpec::kJsonSchema, schema}, vocab), 2, 12,
                   5);
  CheckRandomWalks(Bind({ConstraintSpec::kGbnf, kUtf8Grammar}, vocab), 2, 12,
                   6);
}

TEST(TokenMask, EndOfGenerationOnlyWhenComplete) {
  auto vocab = testing::SyntheticIndex(0, 1);
  Matcher m(Bind({ConstraintSpec::kGbnf, R"(root ::= "ab" "c"?)"}, vocab));
  EXPECT_FALSE(Bit(m.Mask(), 0));
  EXPECT_TRUE(m.AcceptBytes("ab"));
  EXPECT_TRUE(Bit(m.Mask(), 0));  // complete: may end
  EXPECT_FALSE(m.Finished());     // or go on with "c"
  EXPECT_TRUE(Bit(m.Mask(), 'c'));
  EXPECT_TRUE(m.Accept('c').ok());
  EXPECT_TRUE(m.Finished());
  int allowed = 0;
  for (uint64_t w : m.Mask()) allowed += __builtin_popcountll(w);
  EXPECT_EQ(allowed, 1);  // only end-of-generation
  EXPECT_EQ(m.Accept('c').code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(m.Accept(0).ok());
}

TEST(TokenMask, NoEndOfGenerationTokenIsAnError) {
  auto vocab = std::make_shared<TokenIndex>(std::vector<std::string>{"a"},
                                            std::vector<int32_t>{});
  auto c = CompileConstraint({ConstraintSpec::kGbnf, "root ::= \"a\""}, vocab);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

// Small caches force compaction and mask eviction mid-walk; masks still
// equal the brute force.
TEST(TokenMask, CompactionAndEvictionKeepMasksExact) {
  auto vocab = testing::SyntheticIndex(300, 9);
  GrammarLimits limits;
  limits.max_states = 8;
  limits.max_stack_nodes = 64;
  limits.mask_cache_entries = 2;
  auto c = CompileConstraint({ConstraintSpec::kJsonObject, ""}, vocab, limits);
  ASSERT_TRUE(c.ok()) << c.status();
  CheckRandomWalks(*c, 2, 15, 11);
}

// The shared MaskIndex path (truncated stacks, context-dependent
// rechecks) against the brute force deep inside nested values, where
// stacks are truncated; later walks hit entries of earlier ones (other
// nesting depths, other matchers). Without the index (mask_index_bytes 0)
// and with a tiny one (eviction) the masks are the same.
TEST(TokenMask, SharedIndexInsideNestingEqualsBruteForce) {
  auto vocab = testing::SyntheticIndex(400, 21);
  const std::string prefixes[] = {
      "", "{\"a\": [", "{\"a\": [[{\"b\": {\"c\": \"x", "{\"k\": \"\\u00"};
  for (int64_t bytes : {int64_t{64} << 20, int64_t{0}, int64_t{1}}) {
    GrammarLimits limits;
    limits.mask_index_bytes = bytes;
    limits.mask_cache_entries = 2;  // most masks come from the index
    auto c =
        CompileConstraint({ConstraintSpec::kJsonObject, ""}, vocab, limits);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->masks == nullptr, bytes == 0);
    uint32_t seed = 30;
    for (const std::string& prefix : prefixes) {
      CheckRandomWalks(*c, 2, 14, seed++, prefix);
    }
    if (bytes > 1) {
      // Entries were reused: fewer walks than lookups.
      EXPECT_GT((*c)->masks->lookups(), 0);
      EXPECT_LT((*c)->masks->walks(), (*c)->masks->lookups());
    }
  }
}

// Equal specs share one compiled constraint (and so its MaskIndex).
TEST(TokenMask, EqualConstraintsAreShared) {
  auto vocab = testing::SyntheticIndex(10, 24);
  const ConstraintSpec spec{ConstraintSpec::kGbnf, "root ::= \"ab\"*"};
  auto a = CompileConstraint(spec, vocab);
  auto b = CompileConstraint(spec, vocab);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  GrammarLimits other;
  other.max_stacks = 100;
  auto c = CompileConstraint(spec, vocab, other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*a, *c);
  auto d = CompileConstraint({ConstraintSpec::kGbnf, "root ::= \"a\"*"}, vocab);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(*a, *d);
}

// Grammars that stress truncation: nullable chains longer than
// MaskIndex::kMaxKept, rules that end right after a token, ambiguous
// alternatives of different lengths, right and centre recursion, bounded
// repetition, UTF-8 classes, a schema with nested arrays.
TEST(TokenMask, OddGrammarsEqualBruteForce) {
  auto vocab = testing::SyntheticIndex(300, 22);
  const char* gbnf[] = {
      R"(root ::= a{0,40} "x" | "{" root "}"
         a ::= "a"? "b"?)",
      R"(root ::= ( x | y )* "."
         x ::= "ab" | "a" | "abc" y?
         y ::= "\"" [^"]* "\"" | "[" root "]")",
      "root ::= \"(\" root \")\" root | \"\"",
      R"(root ::= item ("," item){0,30}
         item ::= [0-9]{1,3} | "\"" [a-z\u00e9\u03b2]{0,6} "\"" | "[" root? "]")",
      R"(root ::= ws (k ws ":" ws v ws)* "!"
         ws ::= [ 
]*
         k ::= [a-z]+
         v ::= "{" root "}" | k | "")",
  };
  uint32_t seed = 50;
  for (const char* g : gbnf) {
    SCOPED_TRACE(g);
    CheckRandomWalks(Bind({ConstraintSpec::kGbnf, g}, vocab), 3, 16, seed++);
  }
  const std::string schema = R"({"type":"object","properties":{
      "a":{"type":"array","items":{"type":"array","items":{"type":"string",
      "maxLength":4}}},"b":{"$ref":"#"}},"additionalProperties":false})";
  CheckRandomWalks(Bind({ConstraintSpec::kJsonSchema, schema}, vocab), 3, 20,
                   seed++);
}

// x{m,n}: the states of one repetition fold onto one walk of x*
// (mask_index.h). Masks equal the brute force where folding applies and
// where it must give up: a continuation that takes x's first bytes, an x
// that is not prefix-free, nested repetitions, a schema's maxLength.
TEST(TokenMask, BoundedRepetitionFoldsExactly) {
  auto vocab = testing::SyntheticIndex(300, 25);
  struct Case {
    ConstraintSpec spec;
    int folds;  // 1: some entry is folded; 0: none; -1: either
  };
  const Case cases[] = {
      {{ConstraintSpec::kGbnf, R"(root ::= ( "\"" [^"]{0,20} "\"" " " )* ".")"},
       1},
      {{ConstraintSpec::kGbnf, R"(root ::= ( [a-z]{2,9} ";" )* ".")"}, 1},
      {{ConstraintSpec::kGbnf, R"(root ::= ( [a-c]{0,3} "," ){0,4} ".")"}, -1},
      {{ConstraintSpec::kGbnf, R"(root ::= [a]{0,6} [a]* ".")"}, 0},
      {{ConstraintSpec::kGbnf, R"(root ::= ( "ab" | "a" ){0,5} "b.")"}, 0},
      // States inside a copy of x beside a stack for what follows (the
      // second alternative): such a state is no loop head (StartsCopy).
      {{ConstraintSpec::kGbnf,
        R"(root ::= ( "a" [b]* "c" ){0,3} "\"" | "a" [b]* "\"")"},
       -1},
      {{ConstraintSpec::kGbnf,
        R"(root ::= ( "x" | "a" [b]{0,9} "c" ){0,3} "." | "abbb.")"},
       -1},
      {{ConstraintSpec::kJsonSchema,
        R"({"type":"object","properties":{"n":{"type":"string",
        "maxLength":20},"t":{"type":"array","items":{"type":"string",
        "maxLength":8},"maxItems":3}},"required":["n","t"],
        "additionalProperties":false})"},
       1},
  };
  uint32_t seed = 70;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.spec.text);
    GrammarLimits limits;
    limits.mask_cache_entries = 2;  // most masks come from the index
    auto c = CompileConstraint(k.spec, vocab, limits);
    ASSERT_TRUE(c.ok()) << c.status();
    CheckRandomWalks(*c, 4, 24, seed++,
                     k.spec.kind == ConstraintSpec::kGbnf ? "" : "{\"n\": \"");
    if (k.folds >= 0) {
      EXPECT_EQ((*c)->masks->folds() > 0, k.folds == 1);
    }
  }
}

// A state inside a copy of x (the inner [b]* of the last copy) beside a
// stack for what follows: folded as a loop head, each 'b' would count as
// a copy and "bb" would be refused with no copy left to start. The masks
// must stay exact here. (This case is not folded even without
// MaskIndex::StartsCopy, so it does not show that guard is needed; no
// case built so far does.)
TEST(TokenMask, StatesInsideACopyAreNotLoopHeads) {
  auto vocab = std::make_shared<TokenIndex>(
      std::vector<std::string>{"", "a", "b", "bb", "bbb", "\""},
      std::vector<int32_t>{0});
  auto c = CompileConstraint(
      {ConstraintSpec::kGbnf, R"(root ::= ( "a" [b]* ){0,2} "\"")"}, vocab);
  ASSERT_TRUE(c.ok()) << c.status();
  Matcher m(*c);
  ASSERT_TRUE(m.AcceptBytes("aa"));
  const std::vector<uint64_t> mask = m.Mask();
  for (int32_t t : {2, 3, 4, 5}) EXPECT_TRUE(Bit(mask, t)) << vocab->bytes(t);
  EXPECT_FALSE(Bit(mask, 1));  // a third "a"
  CheckRandomWalks(*c, 3, 6, 90);
}

// The 21 count states of a string of at most 20 characters cost one walk
// of the folded x* and a few plain ones, not one each (and one each with
// GrammarLimits::fold_repeats off).
TEST(TokenMask, CountStatesShareOneWalk) {
  auto vocab = testing::SyntheticIndex(300, 26);
  int32_t ab = -1;
  for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
    if (vocab->bytes(t) == "ab") ab = t;
  }
  ASSERT_GE(ab, 0);
  for (bool fold : {true, false}) {
    SCOPED_TRACE(fold);
    GrammarLimits limits;
    limits.mask_cache_entries = 2;
    limits.fold_repeats = fold;
    auto c = CompileConstraint(
        {ConstraintSpec::kGbnf, R"(root ::= "\"" [^"]{0,20} "\"")"}, vocab,
        limits);
    ASSERT_TRUE(c.ok()) << c.status();
    Matcher m(*c);
    ASSERT_TRUE(m.AcceptBytes("\""));
    for (int i = 0; i < 20; ++i) {
      const std::vector<uint64_t> mask = m.Mask();
      // 'x' and "ab" fit while at least one / two characters remain.
      EXPECT_TRUE(Bit(mask, 'x'));
      EXPECT_EQ(Bit(mask, ab), i <= 18) << i;
      ASSERT_TRUE(m.AcceptBytes("x"));
    }
    EXPECT_FALSE(Bit(m.Mask(), 'x'));  // 20 characters: only the quote
    EXPECT_TRUE(Bit(m.Mask(), '"'));
    if (fold) {
      EXPECT_GE((*c)->masks->folds(), 15);
      EXPECT_LE((*c)->masks->walks(), 4);
    } else {
      EXPECT_EQ((*c)->masks->folds(), 0);
      EXPECT_GE((*c)->masks->walks(), 20);
    }
  }
}

// An overflowing grammar (stacks cut at max_stacks) turns the index off;
// masks stay non-empty and allowed tokens are accepted.
TEST(TokenMask, OverflowFallsBackToThePlainWalk) {
  auto vocab = testing::SyntheticIndex(50, 23);
  GrammarLimits limits;
  limits.max_stacks = 16;
  auto c = CompileConstraint({ConstraintSpec::kGbnf, R"(root ::= x
    x ::= "a" x "b" | "a" x "c" | "a" x | "")"},
                             vocab, limits);
  ASSERT_TRUE(c.ok()) << c.status();
  Matcher m(*c);
  for (int i = 0; i < 30; ++i) {
    const auto& mask = m.Mask();
    int32_t pick = -1;
    for (int32_t t = 0; t < vocab->vocab_size() && pick < 0; ++t) {
      if (Bit(mask, t)) pick = t;
    }
    ASSERT_GE(pick, 0);
    if (vocab->IsEog(pick)) break;
    ASSERT_TRUE(m.Accept(pick).ok());
  }
}

}  // namespace
}  // namespace ckv::grammar
