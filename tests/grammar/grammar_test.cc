// GBNF parsing, the recogniser against its reference, and hostile grammars.
#include <chrono>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/recognizer.h"
#include "model/grammar/reference_recognizer.h"

namespace ckv::grammar {
namespace {

std::shared_ptr<const Grammar> Compile(const std::string& text) {
  auto g = CompileGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

// Whether `input` is a sentence, by the recogniser (and the reference
// must agree at every byte).
bool Accepts(const std::shared_ptr<const Grammar>& g,
             const std::string& input) {
  Recognizer rec(g, {});
  ReferenceRecognizer ref(*g);
  Recognizer::State s = rec.Start();
  for (unsigned char b : input) {
    s = rec.Step(s, b);
    const bool alive = ref.Feed(b);
    EXPECT_EQ(s != Recognizer::kDead, alive) << "at byte of " << input;
    if (s == Recognizer::kDead) return false;
    EXPECT_EQ(rec.Accepting(s), ref.Accepting());
  }
  return rec.Accepting(s);
}

TEST(Gbnf, LiteralsAlternationAndRepetition) {
  auto g = Compile(R"(
    root ::= greeting ("," ws name)+ "!"?   # comment
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]{1,3}
    ws ::= [ \t]*
  )");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "hi,Bob"));
  EXPECT_TRUE(Accepts(g, "hello, Al,\t Zed!"));
  EXPECT_FALSE(Accepts(g, "hi"));        // + needs one
  EXPECT_FALSE(Accepts(g, "hi,B"));      // {1,3}
  EXPECT_FALSE(Accepts(g, "hi,Bobby"));  // at most 3
  EXPECT_FALSE(Accepts(g, "hey,Bob"));
  EXPECT_FALSE(Accepts(g, "hi,Bob!!"));
}

TEST(Gbnf, EscapesClassesNegationAndDot) {
  auto g = Compile(
      R"(root ::= "\"" ( [^"\\\n] | "\\" ["nt\\] )* "\"" [\x41-\x43] . "\u00e9")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "\"a\\nb\"Bx\xc3\xa9"));
  EXPECT_TRUE(Accepts(g, "\"\xe2\x82\xac\"C\xf0\x9f\x98\x80\xc3\xa9"));
  EXPECT_FALSE(Accepts(g, "\"a\"b\"Bx\xc3\xa9"));
  EXPECT_FALSE(Accepts(g, "\"a\"Dx\xc3\xa9"));
  // Invalid UTF-8 never matches a code point class.
  EXPECT_FALSE(Accepts(g, "\"\xc3\"A"));
  EXPECT_FALSE(Accepts(g, "\"\xed\xa0\x80\"A"));  // a surrogate
}

TEST(Gbnf, RepetitionBounds) {
  auto g = Compile(R"(root ::= "a"{2} "b"{1,} "c"{0,2} ("d" "e"){2,3})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "aabdede"));
  EXPECT_TRUE(Accepts(g, "aabbbccdedede"));
  EXPECT_FALSE(Accepts(g, "abdede"));
  EXPECT_FALSE(Accepts(g, "aabcccdede"));
  EXPECT_FALSE(Accepts(g, "aabde"));
  EXPECT_FALSE(Accepts(g, "aabdedededede"));
}

TEST(Gbnf, RecursionAndEmptyAlternatives) {
  auto g = Compile(R"(
    root ::= list
    list ::= "[" ( item ( "," item )* )? "]"
    item ::= list | [0-9]+ |
  )");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "[]"));
  EXPECT_TRUE(Accepts(g, "[[1,[]],22,]"));
  EXPECT_TRUE(Accepts(g, "[,]"));
  EXPECT_FALSE(Accepts(g, "[[1]"));
}

TEST(Gbnf, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"root ::= \"abc", "unterminated string"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= x", "rule 'x' is used but not defined"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root ::= \"a\"{3,2}", "max < min"},
      {"root ::= \"a\"{5000}", "repetition bound above"},
      {"root ::= [z-a]", "end before start"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"a\"\n  @", "line 2, column 3"},
      {"", "no rules"},
  };
  for (const Case& c : cases) {
    auto g = CompileGbnf(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.want), std::string::npos)
        << c.text << " -> " << g.status();
  }
}

// Random strings over a grammar's alphabet: recogniser == reference.
TEST(Recognizer, MatchesReferenceOnRandomInput) {
  const std::string grammars[] = {
      R"(root ::= ( "ab" | "a" "b"? | [b-c]+ )* "c")",
      R"(root ::= x x
         x ::= "a" x "b" | "a" | "")",
      R"(root ::= ( [^b] | "b" [a-c] )* "\u00e9"?)",
      R"(root ::= "{" ( k ":" v ( "," k ":" v )* )? "}"
         k ::= "\"" [a-c]{0,3} "\""
         v ::= [0-9]+ | root)",
  };
  const std::string alphabet = "abc{}\":,019\xc3\xa9";
  std::mt19937 rng(7);
  for (const std::string& text : grammars) {
    auto g = Compile(text);
    ASSERT_NE(g, nullptr);
    for (int trial = 0; trial < 300; ++trial) {
      std::string s;
      const int n = static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i)
        s.push_back(alphabet[rng() % alphabet.size()]);
      Accepts(g, s);  // asserts agreement byte by byte
    }
  }
}

TEST(Recognizer, RightRecursionRunsInConstantStates) {
  auto g = Compile(R"(root ::= "[" [a-z]* "]")");
  ASSERT_NE(g, nullptr);
  Recognizer rec(g, {});
  auto s = rec.Step(rec.Start(), '[');
  const auto inside = rec.Step(s, 'a');
  for (int i = 0; i < 10000; ++i) s = rec.Step(s, 'a' + i % 26);
  EXPECT_EQ(s, inside);  // the same state, not a deeper stack
  EXPECT_LE(rec.num_states(), 4u);
}

TEST(Recognizer, CompactKeepsTheLanguage) {
  auto g = Compile(R"g(root ::= "(" root ")" | "x")g");
  ASSERT_NE(g, nullptr);
  Recognizer rec(g, {});
  auto s = rec.Start();
  for (int i = 0; i < 50; ++i) s = rec.Step(s, '(');
  s = rec.Compact(s);
  s = rec.Step(s, 'x');
  for (int i = 0; i < 50; ++i) {
    ASSERT_NE(s, Recognizer::kDead);
    EXPECT_FALSE(rec.Accepting(s));
    s = rec.Step(s, ')');
  }
  ASSERT_NE(s, Recognizer::kDead);
  EXPECT_TRUE(rec.Accepting(s));
  EXPECT_EQ(rec.Step(s, ')'), Recognizer::kDead);
}

// Hostile grammars: a clear INVALID_ARGUMENT, fast.
TEST(Hostile, RejectedQuicklyWithAClearError) {
  std::string exponential = "root ::= x30\nx0 ::= \"a\"\n";
  for (int i = 1; i <= 30; ++i) {
    absl::StrAppend(&exponential, "x", i, " ::= x", i - 1, " | x", i - 1,
                    " \"b\"\n");
  }
  std::string deep = "root ::= ";
  for (int i = 0; i < 5000; ++i) deep += "(";
  std::string huge = "root ::= \"" + std::string(1 << 20, 'a') + "\"";
  std::string many = "root ::= ";
  for (int i = 0; i < 500; ++i) many += "[a-z]{1000}";
  struct Case {
    std::string text, want;
  } cases[] = {
      {"root ::= root \"a\" | \"b\"", "left-recursive"},
      {"root ::= x\nx ::= y? x \"a\" | \"b\"\ny ::= \"c\"", "left-recursive"},
      {"root ::= (\"\" | root) \"a\"", "left-recursive"},
      {exponential, "exponential alternation"},
      {deep, "nesting deeper than"},
      {huge, "bytes; the limit is"},
      {many, "elements after expansion"},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    auto g = CompileGbnf(c.text);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    ASSERT_FALSE(g.ok()) << c.text.substr(0, 80);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.want), std::string::npos)
        << g.status();
    EXPECT_LT(ms, 2000) << c.want;
  }
}

// An ambiguous grammar whose stack count doubles per byte: the state dies
// at max_stacks instead of growing without bound.
TEST(Hostile, StackExplosionIsCutOff) {
  auto g = Compile(R"(root ::= x
    x ::= "a" x "b" | "a" x "c" | "a" x | "")");
  ASSERT_NE(g, nullptr);
  GrammarLimits limits;
  limits.max_stacks = 64;
  Recognizer rec(g, limits);
  auto s = rec.Start();
  for (int i = 0; i < 40 && s != Recognizer::kDead; ++i) s = rec.Step(s, 'a');
  EXPECT_EQ(s, Recognizer::kDead);
  EXPECT_TRUE(rec.Overflowed());
}

}  // namespace
}  // namespace ckv::grammar
