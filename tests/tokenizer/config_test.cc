// Tests on small in-memory vocabularies (TokenizerConfig) and on malformed
// GGUF tokenizer metadata (built with GgufWriter).

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"

namespace ckv {
namespace {

constexpr char kSp[] = "\xE2\x96\x81";  // U+2581

// <unk> <s> </s>, then optional byte tokens, then `extra` (score = -index).
TokenizerConfig SpmConfig(bool with_bytes, std::vector<std::string> extra) {
  TokenizerConfig c;
  c.type = TokenizerType::kSentencePiece;
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {2, 3, 3};
  if (with_bytes) {
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      c.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
      c.token_types.push_back(6);
    }
  }
  for (std::string& e : extra) {
    c.tokens.push_back(std::move(e));
    c.token_types.push_back(1);
  }
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    c.scores.push_back(-static_cast<float>(i));
  }
  return c;
}

std::unique_ptr<Tokenizer> Build(TokenizerConfig c) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      Tokenizer::FromConfig(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<int32_t> Enc(const Tokenizer& t, const std::string& s,
                         bool add_special = false) {
  auto ids = t.Encode(s, add_special, false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(SpmConfigTest, MergesByScoreWithByteFallback) {
  const std::string sa = std::string(kSp) + "a";
  auto t = Build(SpmConfig(true, {kSp, "a", "b", sa, "ab", sa + "b"}));
  ASSERT_NE(t, nullptr);
  const int32_t base = 3 + 256;  // first extra id
  // "▁a" (score -(base+3)) outranks "ab" (-(base+4)), then "▁a"+"b".
  EXPECT_EQ(Enc(*t, "ab"), (std::vector<int32_t>{base + 5}));
  EXPECT_EQ(Enc(*t, "ba"),
            (std::vector<int32_t>{base + 0, base + 2, base + 1}));
  // 'é' = C3 A9 has no token: byte fallback.
  EXPECT_EQ(Enc(*t, "\xC3\xA9"),
            (std::vector<int32_t>{base + 0, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(Enc(*t, "a", true), (std::vector<int32_t>{1, base + 3}));
  EXPECT_EQ(t->Decode(Enc(*t, "ab \xC3\xA9")), " ab \xC3\xA9");
}

TEST(SpmConfigTest, UnknownWithoutByteTokensAndNoSpacePrefix) {
  TokenizerConfig c = SpmConfig(false, {kSp, "a"});
  c.add_space_prefix = false;
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  // Each byte of an unknown character maps to <unk>.
  EXPECT_EQ(Enc(*t, "a\xC3\xA9"), (std::vector<int32_t>{4, 0, 0}));
  EXPECT_EQ(Enc(*t, " a"), (std::vector<int32_t>{3, 4}));
}

TokenizerConfig BpeConfig() {
  TokenizerConfig c;
  c.type = TokenizerType::kBpe;
  c.pre = "gpt-2";
  // Byte-level: ' ' is U+0120 "Ġ".
  c.tokens = {"a",
              "b",
              "\xC4\xA0",
              "ab",
              "\xC4\xA0"
              "ab",
              "<|end|>"};
  c.token_types = {1, 1, 1, 1, 1, 3};
  c.merges = {"a b", "\xC4\xA0 ab"};
  return c;
}

TEST(BpeConfigTest, MergesByRank) {
  auto t = Build(BpeConfig());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "ab ab"), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(Enc(*t, "ba"), (std::vector<int32_t>{1, 0}));
  // Bytes with no token are dropped, as llama.cpp does.
  EXPECT_EQ(Enc(*t, "a?"), (std::vector<int32_t>{0}));
  EXPECT_EQ(t->Decode({4, 2, 0}), " ab a");
  EXPECT_FALSE(t->add_bos());
  // "<|end|>" is detected as end of generation by text.
  EXPECT_TRUE(t->IsEndOfGeneration(5));
  auto parsed = t->Encode("a<|end|>", false, true);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, (std::vector<int32_t>{0, 5}));
}

TEST(BpeConfigTest, UnknownPreTokenizerIsAnError) {
  TokenizerConfig c = BpeConfig();
  c.pre = "no-such-pre";
  auto t = Tokenizer::FromConfig(std::move(c));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.pre"), std::string::npos);
}

// --- GGUF metadata errors ---------------------------------------------------

gguf::GgufWriter MinimalSpmWriter() {
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, 0, 0, -1});
  w.SetInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 1});
  return w;
}

// Builds a Tokenizer from the serialized writer; returns its status.
absl::Status LoadStatus(const gguf::GgufWriter& w) {
  const std::vector<uint8_t> bytes = w.Serialize();
  auto file = gguf::GgufFile::FromBuffer(bytes.data(), bytes.size());
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file).status();
}

void ExpectError(const gguf::GgufWriter& w, absl::StatusCode code,
                 const std::string& key) {
  const absl::Status s = LoadStatus(w);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(s.message().find(key), std::string::npos) << s;
}

TEST(GgufMetadataTest, MinimalLoads) {
  EXPECT_TRUE(LoadStatus(MinimalSpmWriter()).ok());
}

TEST(GgufMetadataTest, MissingModel) {
  gguf::GgufWriter w;
  w.SetStringArray("tokenizer.ggml.tokens", {"a"});
  ExpectError(w, absl::StatusCode::kNotFound, "tokenizer.ggml.model");
}

TEST(GgufMetadataTest, UnsupportedModel) {
  gguf::GgufWriter w = MinimalSpmWriter();
  // Known to llama.cpp but not implemented here, and unknown names.
  for (const char* model : {"none", "no_vocab", "mystery"}) {
    w.SetString("tokenizer.ggml.model", model);
    ExpectError(w, absl::StatusCode::kUnimplemented, "tokenizer.ggml.model");
  }
}

TEST(GgufMetadataTest, MissingOrMistypedTokens) {
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  ExpectError(w, absl::StatusCode::kNotFound, "tokenizer.ggml.tokens");
  w.SetInt32Array("tokenizer.ggml.tokens", {1, 2});
  ExpectError(w, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
  w.SetStringArray("tokenizer.ggml.tokens", {});
  ExpectError(w, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
}

TEST(GgufMetadataTest, ShortScoresAndTypes) {
  gguf::GgufWriter w = MinimalSpmWriter();
  w.SetFloat32Array("tokenizer.ggml.scores", {0, 0});
  ExpectError(w, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.scores");
  w = MinimalSpmWriter();
  w.SetInt32Array("tokenizer.ggml.token_type", {1});
  ExpectError(w, absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.token_type");
  w = MinimalSpmWriter();
  w.SetStringArray("tokenizer.ggml.token_type", {"x", "y", "z", "w"});
  ExpectError(w, absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.token_type");
}

TEST(GgufMetadataTest, MistypedSpecialIdsAndFlags) {
  gguf::GgufWriter w = MinimalSpmWriter();
  w.SetString("tokenizer.ggml.bos_token_id", "1");
  ExpectError(w, absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.bos_token_id");
  w = MinimalSpmWriter();
  w.SetString("tokenizer.ggml.add_bos_token", "yes");
  ExpectError(w, absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.add_bos_token");
}

TEST(GgufMetadataTest, AddBosWithoutBos) {
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", {"a"});  // default bos 1: absent
  ExpectError(w, absl::StatusCode::kInvalidArgument,
              "tokenizer.ggml.add_bos_token");
  w.SetBool("tokenizer.ggml.add_bos_token", false);
  EXPECT_TRUE(LoadStatus(w).ok());
}

TEST(GgufMetadataTest, BpeNeedsMergesAndKnownPre) {
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "qwen2");
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  ExpectError(w, absl::StatusCode::kNotFound, "tokenizer.ggml.merges");
  w.SetStringArray("tokenizer.ggml.merges", {"a b"});
  EXPECT_TRUE(LoadStatus(w).ok());
  w.SetString("tokenizer.ggml.pre", "mystery");
  ExpectError(w, absl::StatusCode::kUnimplemented, "tokenizer.ggml.pre");
}

TEST(GgufMetadataTest, DuplicateTokens) {
  gguf::GgufWriter w = MinimalSpmWriter();
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<s>"});
  ExpectError(w, absl::StatusCode::kInvalidArgument, "duplicate token");
}

}  // namespace
}  // namespace ckv
