// Tests of the pre-tokenizer table (every tokenizer.ggml.pre name llama.cpp
// knows), llama.cpp's regex dialect, the end-of-generation rules, and the
// Gemma 4, Unigram and RWKV algorithms on small in-memory vocabularies.
// Expected values are worked out by hand from llama.cpp's rules.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace ckv {
namespace {

using tokenizer_internal::KnownPreTokenizerNames;
using tokenizer_internal::Pretokenizer;
using tokenizer_internal::PreTokenizerSpecFor;

constexpr char kSp[] = "\xE2\x96\x81";  // U+2581

std::vector<std::string> SplitWith(const std::vector<std::string>& patterns,
                                   const std::string& text) {
  auto pt = Pretokenizer::Create(patterns);
  EXPECT_TRUE(pt.ok()) << pt.status();
  if (!pt.ok()) return {};
  std::vector<absl::string_view> pieces;
  const absl::Status s = (*pt)->Split(text, &pieces);
  EXPECT_TRUE(s.ok()) << s;
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

std::vector<std::string> SplitPre(const std::string& pre,
                                  const std::string& text) {
  auto spec = PreTokenizerSpecFor(pre);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? SplitWith(spec->patterns, text)
                   : std::vector<std::string>{};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTable, EveryNameCompilesAndCoversText) {
  const std::string sample =
      "Hello, World! It's 1234567 caf\xC3\xA9 \xE4\xB8\x96\xE7\x95\x8C"
      "\xEA\xB0\x80 \n\n\t  x\xC2\x85y <sentinel:12> IMGIMGABZ "
      "\xF0\x9F\xA6\x99";
  const std::vector<std::string> names = KnownPreTokenizerNames();
  EXPECT_GE(names.size(), 90u);
  int supported = 0;
  for (const std::string& name : names) {
    auto spec = PreTokenizerSpecFor(name);
    if (!spec.ok()) {
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kUnimplemented) << name;
      continue;
    }
    ++supported;
    const Pieces pieces = SplitWith(spec->patterns, sample);
    std::string joined;
    for (const std::string& p : pieces) {
      EXPECT_FALSE(p.empty()) << name;
      joined += p;
    }
    EXPECT_EQ(joined, sample) << name;
    EXPECT_GE(pieces.size(), 3u) << name;
  }
  EXPECT_EQ(supported, static_cast<int>(names.size()));
  EXPECT_EQ(PreTokenizerSpecFor("no-such-pre").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(PreTokenizerSpecFor("").ok());  // missing key: "default"
}

TEST(PreTokenizerTable, FamiliesShareSettings) {
  auto llama3 = PreTokenizerSpecFor("llama3");
  auto falcon3 = PreTokenizerSpecFor("falcon3");
  auto dbrx = PreTokenizerSpecFor("dbrx");
  ASSERT_TRUE(llama3.ok() && falcon3.ok() && dbrx.ok());
  EXPECT_EQ(llama3->patterns, falcon3->patterns);
  EXPECT_EQ(llama3->patterns, dbrx->patterns);
  EXPECT_TRUE(llama3->ignore_merges && llama3->add_bos);
  EXPECT_FALSE(dbrx->ignore_merges || dbrx->add_bos);
  auto gemma4 = PreTokenizerSpecFor("gemma4");
  ASSERT_TRUE(gemma4.ok());
  EXPECT_FALSE(gemma4->byte_encode);
  EXPECT_TRUE(gemma4->escape_whitespaces && gemma4->whole_newline_runs);
  EXPECT_TRUE(PreTokenizerSpecFor("glm4")->no_default_bos);
}

TEST(PreTokenizerSplit, DeepseekCoder) {
  EXPECT_EQ(
      SplitPre("deepseek-coder",
               "Hello, \xE4\xB8\x96\xE7\x95\x8C"
               "123"),
      (Pieces{"Hello", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", "1", "2", "3"}));
}

TEST(PreTokenizerSplit, StarcoderDigitsAlone) {
  EXPECT_EQ(SplitPre("starcoder", "ab 123"),
            (Pieces{"ab", " ", "1", "2", "3"}));
  EXPECT_EQ(SplitPre("gpt-2", "ab 123"), (Pieces{"ab", " 123"}));
}

TEST(PreTokenizerSplit, EmptyMatchesSplit) {
  // superbpe groups digits by three from the right with a lookahead-only
  // pattern: its empty matches are split points.
  EXPECT_EQ(SplitPre("superbpe", "1234567 ab"),
            (Pieces{"1", "234", "567", " ab"}));
}

TEST(PreTokenizerSplit, DialectDigitsAndWordBoundaryAreAscii) {
  // \d{1,3}(?=(?:\d{3})*\b): 'é' ends the digit run for ASCII \b.
  const std::vector<std::string> aya = {
      PreTokenizerSpecFor("tiny_aya")->patterns.front()};
  EXPECT_EQ(SplitWith(aya, "1234\xC3\xA9"), (Pieces{"1", "234", "\xC3\xA9"}));
  // \d is ASCII: an Arabic-Indic digit is not one.
  EXPECT_EQ(SplitWith({R"(\d+)"}, "12\xD9\xA3"), (Pieces{"12", "\xD9\xA3"}));
}

TEST(PreTokenizerSplit, DialectWhitespaceAndDollar) {
  // U+0085 is White_Space for llama.cpp.
  EXPECT_EQ(SplitWith({R"(\s+)"}, "a\xC2\x85 b"),
            (Pieces{"a", "\xC2\x85 ", "b"}));
  EXPECT_EQ(SplitWith({R"([^\s]+)"},
                      "a\xC2\x85"
                      "b"),
            (Pieces{"a", "\xC2\x85", "b"}));
  // $ matches only at the very end, not before a final newline.
  EXPECT_EQ(SplitWith({"a$"}, "a\n"), (Pieces{"a\n"}));
  EXPECT_EQ(SplitWith({"a$"}, "ba"), (Pieces{"b", "a"}));
  EXPECT_EQ(tokenizer_internal::AdaptPattern(R"([^\d])"), "[^0-9]");
}

// --- End of generation -------------------------------------------------------

// Byte-level BPE config whose tokens are `texts` (all typed normal).
TokenizerConfig TextVocab(std::vector<std::string> texts) {
  TokenizerConfig c;
  c.type = TokenizerType::kBpe;
  c.pre = "gpt-2";
  c.tokens = std::move(texts);
  c.token_types.assign(c.tokens.size(), 1);
  return c;
}

std::unique_ptr<Tokenizer> Build(TokenizerConfig c) {
  auto t = Tokenizer::FromConfig(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(EndOfGeneration, TextHeuristicsMarkControl) {
  auto t = Build(TextVocab({"a", "<|im_end|>", "<end_of_turn>", "<|eom_id|>",
                            "<|fim_pad|>", "b", "<|endoftext|>"}));
  ASSERT_NE(t, nullptr);
  // Default BPE eos id 11 is out of range: no EOS.
  EXPECT_EQ(t->eos_id(), -1);
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{1, 2, 3, 4, 6}));
  EXPECT_EQ(t->eot_id(), 1);  // first in llama.cpp's EOT list
  for (int32_t id : t->eog_ids()) EXPECT_TRUE(t->IsControl(id)) << id;
  EXPECT_FALSE(t->IsControl(0));
  EXPECT_EQ(t->TokenToPiece(1, /*render_special=*/false), "");
}

TEST(EndOfGeneration, ConfiguredIdsJoin) {
  TokenizerConfig c = TextVocab({"a", "b", "c", "d"});
  c.eos_id = 1;
  c.eot_id = 2;
  c.eom_id = 3;
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(t->eot_id(), 2);
}

TEST(EndOfGeneration, HarmonyEndIsNotEog) {
  auto t = Build(TextVocab({"<|return|>", "<|call|>", "<|end|>", "x"}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{0, 1}));
  // <|end|> becomes user-defined: rendered even without render_special.
  EXPECT_EQ(t->TokenToPiece(2, false), "<|end|>");
  // Without <|call|>, <|end|> stays end of generation.
  auto u = Build(TextVocab({"<|return|>", "<|end|>"}));
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->eog_ids(), (std::vector<int32_t>{0, 1}));
}

TEST(EndOfGeneration, Gemma4SlashSIsNotEog) {
  auto t = Build(TextVocab({"<eos>", "</s>", "<turn|>", "<|tool_response>"}));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{0, 2, 3}));
  EXPECT_FALSE(t->IsControl(1));
  auto u = Build(TextVocab({"<unk>", "</s>"}));
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->eog_ids(), (std::vector<int32_t>{1}));
}

// --- Gemma 4
// ------------------------------------------------------------------

TokenizerConfig Gemma4Config() {
  TokenizerConfig c;
  c.type = TokenizerType::kGemma4;
  c.tokens = {"<pad>", "<eos>", "<bos>", "<unk>"};
  c.token_types = {3, 3, 3, 2};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    c.token_types.push_back(6);
  }
  for (std::string t : {std::string(kSp), std::string("a"), std::string("b"),
                        std::string(kSp) + "a", std::string("\n"),
                        std::string("\n\n"), std::string("ab")}) {
    c.tokens.push_back(t);
    c.token_types.push_back(1);
  }
  c.merges = {std::string(kSp) + " a", "a b"};  // no "\n \n" merge
  c.bos_id = 2;
  c.eos_id = 1;
  return c;
}

TEST(Gemma4Test, SpacesAsU2581RawBytesAndNewlineRuns) {
  auto t = Build(Gemma4Config());
  ASSERT_NE(t, nullptr);
  const int32_t sp = 260, a = 261, b = 262, sp_a = 263, nl = 264, nl2 = 265;
  EXPECT_EQ(*t->Encode(" a", false, false), (std::vector<int32_t>{sp_a}));
  EXPECT_EQ(*t->Encode("ab b", false, false),
            (std::vector<int32_t>{a + 5, sp, b}));  // "ab" = 266
  // A newline run that is a token stays whole without a merge rule.
  EXPECT_EQ(*t->Encode("\n\na", false, false), (std::vector<int32_t>{nl2, a}));
  EXPECT_EQ(*t->Encode("\n\n\n", false, false),
            (std::vector<int32_t>{nl, nl, nl}));
  // No token for 'é': its UTF-8 bytes as <0xXX> tokens.
  EXPECT_EQ(*t->Encode("\xC3\xA9", false, false),
            (std::vector<int32_t>{4 + 0xC3, 4 + 0xA9}));
  // BOS is always added for Gemma 4, even if the file says otherwise.
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(*t->Encode("a", true, false), (std::vector<int32_t>{2, a}));
  EXPECT_EQ(t->Decode({sp_a, sp, 4 + 0xC3, 4 + 0xA9, nl2}), " a \xC3\xA9\n\n");
  EXPECT_EQ(t->eog_ids(), (std::vector<int32_t>{1}));
}

// --- Unigram (T5)
// -------------------------------------------------------------

TokenizerConfig UnigramConfig() {
  TokenizerConfig c;
  c.type = TokenizerType::kUnigram;
  const std::string sp = kSp;
  c.tokens = {"<pad>", "</s>",    "<unk>", sp,   sp + "a",
              "b",     sp + "ab", "a",     "[X]"};
  c.token_types = {3, 3, 2, 1, 1, 1, 1, 1, 4};
  c.scores = {0, 0, 0, -3, -1, -1, -10, -2, -50};
  c.add_space_prefix = true;
  return c;
}

TEST(UnigramTest, ViterbiBestScore) {
  auto t = Build(UnigramConfig());
  ASSERT_NE(t, nullptr);
  // "▁ab": ▁a + b = -2 beats ▁ab = -10 and ▁ + a + b = -6.
  EXPECT_EQ(*t->Encode("ab", false, false), (std::vector<int32_t>{4, 5}));
  // Unknown 'z' costs min score - 10 = -20; "zz" is one <unk>.
  EXPECT_EQ(*t->Encode("zz", false, false), (std::vector<int32_t>{3, 2}));
  // Spaces become U+2581 ("a b" -> "▁a▁b").
  EXPECT_EQ(*t->Encode("a b", false, false), (std::vector<int32_t>{4, 3, 5}));
  // User-defined tokens score 0 and are matched (here: split off first).
  EXPECT_EQ(*t->Encode("[X]", false, false), (std::vector<int32_t>{8}));
  // EOS appended with add_special; no BOS.
  EXPECT_EQ(*t->Encode("ab", true, false), (std::vector<int32_t>{4, 5, 1}));
  EXPECT_EQ(t->Decode({4, 5}), " ab");
}

TEST(UnigramTest, RemoveExtraWhitespaces) {
  TokenizerConfig c = UnigramConfig();
  c.remove_extra_whitespaces = true;
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  // Runs of spaces collapse, leading/trailing ones go: "▁a▁b".
  EXPECT_EQ(*t->Encode("  a   b ", false, false),
            (std::vector<int32_t>{4, 3, 5}));
}

TEST(UnigramTest, UnusedTokensAreMatchable) {
  TokenizerConfig c = UnigramConfig();
  c.tokens.push_back("<unused0>");  // id 9: GGUF type unused
  c.token_types.push_back(5);
  c.tokens.push_back("<unused1>");  // id 10: control, "unused" by name only
  c.token_types.push_back(3);
  c.scores.insert(c.scores.end(), {0, 0});
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("<unused0>", false, false),
            (std::vector<int32_t>{3, 9}));
  // llama.cpp builds its matcher before marking control tokens named
  // "unused": that one is not matched (its nine characters: one <unk>).
  EXPECT_EQ(*t->Encode("<unused1>", false, false),
            (std::vector<int32_t>{3, 2}));
}

TEST(UnigramTest, MalformedCharsmapIsAnError) {
  TokenizerConfig c = UnigramConfig();
  c.precompiled_charsmap = {5, 0, 0, 0, 1, 2};  // array larger than blob
  auto t = Tokenizer::FromConfig(std::move(c));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("precompiled_charsmap"),
            std::string::npos);
}

// --- RWKV
// -----------------------------------------------------------------------

TEST(RwkvTest, GreedyLongestMatchOnUnescapedBytes) {
  TokenizerConfig c;
  c.type = TokenizerType::kRwkv;
  c.tokens = {"a", "ab", "\\n", "\\x41", "b", "\\\\"};
  c.token_types.assign(c.tokens.size(), 1);
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("ab\nA", true, false), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*t->Encode("bza\\", false, false), (std::vector<int32_t>{4, 0, 5}));
  EXPECT_EQ(t->Decode({1, 2, 3, 5}), "ab\nA\\");
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_EQ(t->eos_id(), -1);
}

}  // namespace
}  // namespace ckv
