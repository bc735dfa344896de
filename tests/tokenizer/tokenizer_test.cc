// Behaviour tests on the real fixture vocabularies: round trips, streaming
// decoding, special tokens, BOS/EOS rules, end-of-generation set, invalid
// input, speed.

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/tokenizer/fixture_util.h"

namespace ckv {
namespace {

struct Loaded {
  std::unique_ptr<Tokenizer> tok;
  std::vector<TokenizerCase> cases;
};

// Fixture vocabularies, loaded once per process; nullptr when absent.
const Loaded* Get(const std::string& name) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Loaded>>();
  auto it = cache->find(name);
  if (it != cache->end()) return it->second.get();
  auto loaded = std::make_unique<Loaded>();
  if (!LoadFixture(name, &loaded->tok, &loaded->cases) || !loaded->tok) {
    loaded.reset();
  }
  const Loaded* result = loaded.get();
  (*cache)[name] = std::move(loaded);
  return result;
}

#define LOAD_OR_FAIL(var, name)                         \
  const Loaded* var = Get(name);                        \
  if (var == nullptr) FAIL() << FixtureMissingReason(); \
  const Tokenizer& var##_tok = *var->tok

std::vector<int32_t> Enc(const Tokenizer& t, const std::string& s,
                         bool add_special = false, bool parse_special = false) {
  absl::StatusOr<std::vector<int32_t>> ids =
      t.Encode(s, add_special, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

bool IsValidUtf8(const std::string& s) {
  // Minimal strict check, independent of the code under test.
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int n = c < 0x80                   ? 1
            : (c >= 0xC2 && c <= 0xDF) ? 2
            : (c >= 0xE0 && c <= 0xEF) ? 3
            : (c >= 0xF0 && c <= 0xF4) ? 4
                                       : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    const unsigned char c1 = n > 1 ? s[i + 1] : 0;
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) ||
        (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) {
      return false;
    }
    i += n;
  }
  return true;
}

class VocabTest : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabTest, RoundTripsFixtureStrings) {
  LOAD_OR_FAIL(v, GetParam());
  const bool spm = v_tok.type() == TokenizerType::kSentencePiece;
  int round_trips = 0;
  for (const TokenizerCase& c : v->cases) {
    const std::string decoded = v_tok.Decode(Enc(v_tok, c.text));
    // SPM adds a space prefix (llama.cpp strips it again when detokenizing;
    // Decode does not), and an empty text gives no tokens at all.
    const std::string want = (spm && !c.text.empty()) ? " " + c.text : c.text;
    EXPECT_EQ(decoded, want);
    round_trips += decoded == want;
  }
  std::cout << "[round-trip] " << GetParam() << ": " << round_trips << "/"
            << v->cases.size() << "\n";
}

TEST_P(VocabTest, StreamingMatchesDecodeAndIsValidUtf8) {
  LOAD_OR_FAIL(v, GetParam());
  for (const TokenizerCase& c : v->cases) {
    StreamingDetokenizer stream(v_tok);
    std::string streamed;
    for (int32_t id : c.ids) {
      const std::string part = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(part)) << c.text;
      streamed += part;
    }
    streamed += stream.Flush();
    EXPECT_EQ(streamed, v_tok.Decode(c.ids)) << c.text;
  }
}

TEST_P(VocabTest, RejectsInvalidUtf8) {
  LOAD_OR_FAIL(v, GetParam());
  const std::string bad[] = {
      "\xFF",           "abc\x80",          "\xC0\x80",
      "\xC1\xBF",       "\xE2\x82",         "x\xE2\x82y",
      "\xED\xA0\x80",   "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80",
      "ok \xF0\x9F\xA6"};
  for (const std::string& s : bad) {
    absl::StatusOr<std::vector<int32_t>> ids = v_tok.Encode(s, true, true);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument)
        << testing::PrintToString(s);
  }
  EXPECT_TRUE(v_tok.Encode(std::string("a\0b", 3), false, false).ok());
}

TEST_P(VocabTest, NeverCrashesOnRandomBytes) {
  LOAD_OR_FAIL(v, GetParam());
  std::mt19937 rng(42);
  const std::string alphabet = "ab \n\t'<|>s\xC3\xA4\xF0\x9F\xA6\x99\x80\xFF";
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = rng() % 40;
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    absl::StatusOr<std::vector<int32_t>> ids = v_tok.Encode(s, true, true);
    if (!ids.ok()) {
      EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    for (int32_t id : *ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, v_tok.vocab_size());
    }
    StreamingDetokenizer stream(v_tok);
    std::string streamed;
    for (int32_t id : *ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    EXPECT_TRUE(IsValidUtf8(streamed));
  }
  // Arbitrary ids decode without crashing.
  EXPECT_EQ(v_tok.TokenToPiece(-1), "");
  EXPECT_EQ(v_tok.TokenToPiece(v_tok.vocab_size()), "");
  EXPECT_EQ(v_tok.Decode({-5, v_tok.vocab_size() + 7}), "");
}

TEST_P(VocabTest, NoBosWithoutAddSpecial) {
  LOAD_OR_FAIL(v, GetParam());
  std::vector<int32_t> plain = Enc(v_tok, "Hello world");
  std::vector<int32_t> special = Enc(v_tok, "Hello world", true);
  ASSERT_FALSE(plain.empty());
  if (v_tok.add_bos()) {
    ASSERT_EQ(special.size(), plain.size() + 1);
    EXPECT_EQ(special.front(), v_tok.bos_id());
  } else {
    EXPECT_EQ(special, plain);
  }
  EXPECT_FALSE(v_tok.add_eos());
  EXPECT_TRUE(v_tok.IsEndOfGeneration(v_tok.eos_id()));
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabTest,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2",
                                           "gpt-2", "command-r",
                                           "deepseek-coder", "falcon", "mpt",
                                           "refact", "starcoder", "gemma-4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

TEST(TokenizerBosRules, PerVocab) {
  const std::pair<const char*, int32_t> expected[] = {
      {"llama-spm", 1},  {"llama-bpe", 128000}, {"qwen2", -1},
      {"gpt-2", -1},     {"command-r", 5},      {"deepseek-coder", 32013},
      {"falcon", -1},    {"mpt", -1},           {"refact", -1},
      {"starcoder", -1}, {"gemma-4", 2}};
  for (const auto& [name, bos] : expected) {
    const Loaded* v = Get(name);
    ASSERT_NE(v, nullptr) << FixtureMissingReason();
    EXPECT_EQ(v->tok->add_bos(), bos >= 0) << name;
    if (bos >= 0) {
      EXPECT_EQ(v->tok->bos_id(), bos) << name;
      EXPECT_EQ(Enc(*v->tok, "Hi", true).front(), bos) << name;
      EXPECT_EQ(Enc(*v->tok, "", true), std::vector<int32_t>{bos}) << name;
    } else {
      EXPECT_TRUE(Enc(*v->tok, "", true).empty()) << name;
    }
  }
}

TEST(TokenizerSpecial, Llama3ParseSpecialOnOff) {
  LOAD_OR_FAIL(v, "llama-bpe");
  const std::string text =
      "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>";
  const std::vector<int32_t> parsed = Enc(v_tok, text, true, true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{128000, 128006, 882, 128007, 271,
                                          6151, 128009}));
  const std::vector<int32_t> plain = Enc(v_tok, text, false, false);
  for (int32_t id : plain) EXPECT_LT(id, 128000);
  EXPECT_EQ(v_tok.Decode(plain), text);
  EXPECT_EQ(v_tok.Decode(parsed), "<|begin_of_text|>" + text);
  EXPECT_EQ(v_tok.Decode(parsed, /*render_special=*/false), "user\n\nhi");
  EXPECT_EQ(v_tok.TokenToPiece(128009, false), "");
  EXPECT_EQ(v_tok.TokenToPiece(128009), "<|eot_id|>");
}

TEST(TokenizerSpecial, SpmSpacePrefixAfterSpecial) {
  LOAD_OR_FAIL(v, "llama-spm");
  // A text run after a special token gets the space prefix again.
  const std::vector<int32_t> ids = Enc(v_tok, "Hello</s>Hello", false, true);
  const std::vector<int32_t> hello = Enc(v_tok, "Hello");
  std::vector<int32_t> want = hello;
  want.push_back(2);
  want.insert(want.end(), hello.begin(), hello.end());
  EXPECT_EQ(ids, want);
  EXPECT_EQ(Enc(v_tok, "<s>", false, true), std::vector<int32_t>{1});
  EXPECT_NE(Enc(v_tok, "<s>", false, false), std::vector<int32_t>{1});
}

TEST(TokenizerSpecial, UserDefinedAlwaysMatched) {
  LOAD_OR_FAIL(v, "qwen2");
  // [PAD151646] is user-defined: matched even with parse_special off, like
  // llama.cpp; <|im_end|> is control: only with parse_special.
  EXPECT_EQ(Enc(v_tok, "[PAD151646]"), std::vector<int32_t>{151646});
  EXPECT_EQ(Enc(v_tok, "<|im_end|>", false, true),
            std::vector<int32_t>{151645});
  EXPECT_GT(Enc(v_tok, "<|im_end|>").size(), 1u);
}

TEST(TokenizerEog, Sets) {
  // llama.cpp's rules: EOS/EOT/EOM, FIM pad/repo/sep, and tokens named like
  // end markers. Qwen2's normal token 128247 "</s>" is one of those names
  // (PaddleOCR's end token), so llama.cpp stops at it too; command-r's
  // "<PAD>" (0) is taken for the FIM pad token; Gemma 4's "</s>" (212) is
  // exempt because the vocabulary has "<|tool_response>" (50).
  const std::pair<const char*, std::vector<int32_t>> expected[] = {
      {"llama-spm", {2}},
      {"llama-bpe", {128001, 128009}},
      {"qwen2", {128247, 151643, 151645}},
      {"gpt-2", {50256}},
      {"command-r", {0, 255001}},
      {"deepseek-coder", {32014}},
      {"falcon", {11}},
      {"mpt", {0}},
      {"refact", {0, 4, 18}},
      {"starcoder", {0, 4}},
      {"gemma-4", {1, 50, 106}}};
  for (const auto& [name, eog] : expected) {
    const Loaded* v = Get(name);
    ASSERT_NE(v, nullptr) << FixtureMissingReason();
    EXPECT_EQ(v->tok->eog_ids(), eog) << name;
    for (int32_t id : eog) {
      EXPECT_TRUE(v->tok->IsEndOfGeneration(id)) << name;
      EXPECT_TRUE(v->tok->IsControl(id)) << name << " " << id;
    }
    EXPECT_FALSE(v->tok->IsEndOfGeneration(v->tok->vocab_size() / 2)) << name;
    EXPECT_FALSE(v->tok->IsEndOfGeneration(-1)) << name;
  }
}

TEST(TokenizerDecode, SpmPieces) {
  LOAD_OR_FAIL(v, "llama-spm");
  EXPECT_EQ(v_tok.TokenToPiece(15043), " Hello");
  EXPECT_EQ(v_tok.TokenToPiece(13), "\n");  // <0x0A>
  EXPECT_EQ(v_tok.TokenToPiece(1), "<s>");
  EXPECT_EQ(v_tok.TokenToPiece(1, false), "");
}

TEST(TokenizerStreaming, HoldsBackSplitCharacters) {
  LOAD_OR_FAIL(v, "llama-spm");
  // " 🦙" is ▁ + byte tokens F0 9F A6 99.
  const std::vector<int32_t> ids = Enc(v_tok, "🦙");
  ASSERT_EQ(ids, (std::vector<int32_t>{29871, 243, 162, 169, 156}));
  StreamingDetokenizer s(v_tok);
  EXPECT_EQ(s.Push(ids[0]), " ");
  EXPECT_EQ(s.Push(ids[1]), "");
  EXPECT_EQ(s.Push(ids[2]), "");
  EXPECT_EQ(s.Push(ids[3]), "");
  EXPECT_EQ(s.Push(ids[4]), "🦙");
  EXPECT_EQ(s.Flush(), "");
  // Incomplete at the end: Flush emits U+FFFD.
  EXPECT_EQ(s.Push(243), "");
  EXPECT_EQ(s.Push(162), "");
  EXPECT_EQ(s.Flush(), "\xEF\xBF\xBD");
  // Ill-formed byte: replaced immediately; a following char is intact.
  EXPECT_EQ(s.Push(258), "\xEF\xBF\xBD");  // <0xFF>
  EXPECT_EQ(s.Push(243), "");
  EXPECT_EQ(s.Push(15043), "\xEF\xBF\xBD Hello");
}

TEST(TokenizerStreaming, BpeMultiTokenCharacters) {
  LOAD_OR_FAIL(v, "llama-bpe");
  const std::string text = "🚀 日本語 😶‍🌫️ ✅";
  const std::vector<int32_t> ids = Enc(v_tok, text);
  StreamingDetokenizer s(v_tok);
  std::string out;
  int held = 0;
  for (int32_t id : ids) {
    const std::string part = s.Push(id);
    EXPECT_TRUE(IsValidUtf8(part));
    held += part.empty();
    out += part;
  }
  out += s.Flush();
  EXPECT_EQ(out, text);
  EXPECT_GT(held, 0);  // some emoji span several tokens
}

// Build time from an opened GGUF and encode throughput on ~2 MB of the
// fixture strings, per vocabulary (printed; only a generous bound asserted).
TEST_P(VocabTest, BuildAndEncodeSpeed) {
  const std::string path =
      TokenizerFixtureDir() + "/ggml-vocab-" + GetParam() + ".gguf";
  LOAD_OR_FAIL(v, GetParam());
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::FromGguf(**file);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string text;
  while (text.size() < (2u << 20)) {
    for (const TokenizerCase& c : v->cases) text += c.text + "\n";
  }
  const auto t2 = std::chrono::steady_clock::now();
  auto ids = (*tok)->Encode(text, false, true);
  const auto t3 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ids.ok());
  const double build_s = std::chrono::duration<double>(t1 - t0).count();
  const double enc_s = std::chrono::duration<double>(t3 - t2).count();
  std::cout << "[perf] " << GetParam() << ": build " << build_s * 1e3
            << " ms; encode " << text.size() / 1e6 / enc_s << " MB/s ("
            << ids->size() << " tokens)\n";
  EXPECT_LT(build_s, 2.0);  // generous: sanitizer / debug builds
  const bool spm = v_tok.type() == TokenizerType::kSentencePiece;
  EXPECT_EQ((*tok)->Decode(*ids, false), spm ? " " + text : text);
}

// Encode is const and thread-safe: concurrent calls give the fixture ids.
TEST_P(VocabTest, ConcurrentEncode) {
  LOAD_OR_FAIL(v, GetParam());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        for (const TokenizerCase& c : v->cases) {
          auto ids = v_tok.Encode(c.text, false, false);
          if (!ids.ok() || *ids != c.ids) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// Long runs that stress regex backtracking and merge queues: every vocab
// must tokenize them quickly, without PCRE2 limit errors, and round-trip.
TEST_P(VocabTest, PathologicalInputs) {
  LOAD_OR_FAIL(v, GetParam());
  const size_t n = 1 << 18;
  const std::string inputs[] = {
      std::string(n, ' '),
      std::string(n, ' ') + "a",
      std::string(n, '\n'),
      std::string(n, 'a'),
      std::string(n, '7'),
      std::string(n, '!'),
      [&] {
        std::string s;
        while (s.size() < n) s += " \n\t'sX";
        return s;
      }(),
      [&] {
        std::string s;
        while (s.size() < n) s += "\xF0\x9F\xA6\x99";
        return s;
      }(),
  };
  const bool spm = v_tok.type() == TokenizerType::kSentencePiece;
  for (const std::string& text : inputs) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::vector<int32_t>> ids = v_tok.Encode(text, true, true);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_LT(s, 10.0);
    EXPECT_EQ(v_tok.Decode(*ids, false), spm ? " " + text : text);
    std::cout << "[pathological] " << GetParam() << " '"
              << absl::CEscape(text.substr(0, 6)) << "...': " << s * 1e3
              << " ms, " << ids->size() << " tokens\n";
  }
}

}  // namespace
}  // namespace ckv
