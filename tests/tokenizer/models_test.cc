// Tests of the WordPiece ("bert"), PLaMo-2, HybriDNA and "whitespace"
// tokenizer models and of the pre-tokenizers llama.cpp splits with
// hand-written code (kimi-k2, afmoe), on small in-memory vocabularies. Expected
// ids are worked out by hand from the algorithms' definitions (see
// wordpiece.cc).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace ckv {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

constexpr char kSp[] = "\xE2\x96\x81";  // U+2581, word start

// Control [PAD] [CLS] [SEP], unknown [UNK], then word pieces in GGUF form
// (word-initial pieces start with U+2581).
TokenizerConfig BertConfig() {
  TokenizerConfig c;
  c.type = TokenizerType::kWordPiece;
  const std::string w = kSp;
  c.tokens = {"[PAD]",
              "[UNK]",
              "[CLS]",
              "[SEP]",
              w + "un",
              "aff",
              "able",
              w + "hello",
              w + ",",
              w + "!",
              w + "cafe",
              w + "\xE4\xB8\x96",
              w + "\xE7\x95\x8C",
              w + "a",
              "b",
              w + "ab",
              w + "$",
              w + "x",
              w + "Caf",
              "\xC3\xA9"};
  c.token_types = {3, 2, 3, 3};
  c.token_types.resize(c.tokens.size(), 1);
  c.bos_id = 2;
  c.sep_id = 3;
  c.unk_id = 1;
  return c;
}

std::unique_ptr<Tokenizer> Build(TokenizerConfig c) {
  auto t = Tokenizer::FromConfig(std::move(c));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

Ids Enc(const Tokenizer& t, const std::string& s, bool add_special = false,
        bool parse_special = false) {
  auto ids = t.Encode(s, add_special, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : Ids{};
}

TEST(WordPieceTest, GreedyLongestMatchFirst) {
  auto t = Build(BertConfig());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "unaffable"), (Ids{4, 5, 6}));
  EXPECT_EQ(Enc(*t, "ab"), (Ids{15}));  // "▁ab" beats "▁a" + "b"
  // A position no piece covers makes the whole word [UNK] ("▁un" + "afx").
  EXPECT_EQ(Enc(*t, "unafx"), (Ids{1}));
  EXPECT_EQ(Enc(*t, "b"), (Ids{1}));  // "b" is only a continuation
}

TEST(WordPieceTest, BertSplittingAndNormalization) {
  auto t = Build(BertConfig());
  ASSERT_NE(t, nullptr);
  // Lowercased; punctuation is a word of its own; "world" has no pieces.
  EXPECT_EQ(Enc(*t, "Hello, World!"), (Ids{7, 8, 1, 9}));
  // Accents stripped after decomposition: É -> E -> e; a combining acute
  // (a mark) is dropped.
  EXPECT_EQ(Enc(*t, "CAF\xC3\x89"), (Ids{10}));
  EXPECT_EQ(Enc(*t, "cafe\xCC\x81"), (Ids{10}));
  // CJK ideographs are single-character words; ASCII symbols too.
  EXPECT_EQ(Enc(*t, "\xE4\xB8\x96\xE7\x95\x8C"), (Ids{11, 12}));
  EXPECT_EQ(Enc(*t, "$x"), (Ids{16, 17}));
  // Unicode whitespace (tab, NBSP, U+3000) separates words; a control
  // character is dropped without splitting the word.
  EXPECT_EQ(Enc(*t,
                "ab\tab\xC2\xA0"
                "ab\xE3\x80\x80"
                "ab"),
            (Ids{15, 15, 15, 15}));
  EXPECT_EQ(Enc(*t,
                "a\x01"
                "b"),
            (Ids{15}));
  EXPECT_EQ(Enc(*t, ""), (Ids{}));
  EXPECT_EQ(Enc(*t, " \n\t "), (Ids{}));
}

TEST(WordPieceTest, SpecialTokens) {
  auto t = Build(BertConfig());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "ab", true), (Ids{2, 15, 3}));  // [CLS] ... [SEP]
  EXPECT_EQ(Enc(*t, "", true), (Ids{2, 3}));
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->bos_id(), 2);
  EXPECT_EQ(t->unk_id(), 1);
  EXPECT_EQ(Enc(*t, "ab[SEP]", false, true), (Ids{15, 3}));
  // Without parse_special "[SEP]" is text: "[", "sep", "]", all unknown.
  EXPECT_EQ(Enc(*t, "ab[SEP]"), (Ids{15, 1, 1, 1}));
}

TEST(WordPieceTest, RoundTripGivesNormalizedWords) {
  auto t = Build(BertConfig());
  ASSERT_NE(t, nullptr);
  // Decode maps U+2581 to a space: the words come back space-separated.
  for (const std::string& x :
       {std::string("hello , cafe"), std::string("unaffable ab $ x")}) {
    EXPECT_EQ(t->Decode(Enc(*t, x)), " " + x) << x;
  }
  EXPECT_EQ(t->Decode(Enc(*t, "Hello,CAF\xC3\x89!")), " hello , cafe !");
  EXPECT_EQ(t->Decode(Enc(*t, "ab", true), /*render_special=*/false), " ab");
  EXPECT_EQ(t->Decode(Enc(*t, "ab", true)), "[CLS] ab[SEP]");
}

TEST(WordPieceTest, CasedVocabularyKeepsCaseAndAccents) {
  TokenizerConfig c = BertConfig();
  c.lowercase = false;  // strip_accents follows lowercase
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, "Caf\xC3\xA9"), (Ids{18, 19}));
  EXPECT_EQ(Enc(*t, "HELLO"), (Ids{1}));
  TokenizerConfig d = BertConfig();
  d.lowercase = false;
  d.strip_accents = true;
  auto u = Build(std::move(d));
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(Enc(*u, "Caf\xC3\xA9"), (Ids{1}));  // "▁Caf" + "e": no "e"
}

TEST(WordPieceTest, MissingSeparatorOrUnknownIsALoadError) {
  TokenizerConfig c = BertConfig();
  c.sep_id.reset();  // default 102 is out of range
  auto t = Tokenizer::FromConfig(std::move(c));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  TokenizerConfig d = BertConfig();
  d.unk_id.reset();
  EXPECT_EQ(Tokenizer::FromConfig(std::move(d)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromWriter(
    const gguf::GgufWriter& w) {
  const std::vector<uint8_t> bytes = w.Serialize();
  auto file = gguf::GgufFile::FromBuffer(bytes.data(), bytes.size());
  if (!file.ok()) return file.status();
  return Tokenizer::FromGguf(**file);
}

TEST(WordPieceTest, LoadsFromGgufKeys) {
  const TokenizerConfig c = BertConfig();
  gguf::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "bert");
  w.SetStringArray("tokenizer.ggml.tokens", c.tokens);
  w.SetInt32Array("tokenizer.ggml.token_type",
                  {c.token_types.begin(), c.token_types.end()});
  w.SetUint32("tokenizer.ggml.bos_token_id", 2);
  w.SetUint32("tokenizer.ggml.seperator_token_id", 3);
  w.SetUint32("tokenizer.ggml.unknown_token_id", 1);
  w.SetBool("tokenizer.ggml.normalizer.lowercase", false);
  auto t = FromWriter(w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->type(), TokenizerType::kWordPiece);
  EXPECT_EQ(Enc(**t, "Caf\xC3\xA9", true), (Ids{2, 18, 19, 3}));
}

// --- "whitespace" model --------------------------------------------------

TEST(WhitespaceModelTest, SegmentsAtWhitespaceThenBpe) {
  TokenizerConfig c;
  c.type = TokenizerType::kWhitespaceBpe;
  c.pre = "whitespace";
  c.tokens = {"a", "b", "ab", "A", "<0x41>"};
  c.token_types = {1, 1, 1, 1, 6};
  c.merges = {"a b"};
  auto t = Build(c);
  ASSERT_NE(t, nullptr);
  // Whitespace is dropped, never tokenized; pieces are raw UTF-8.
  EXPECT_EQ(Enc(*t, " ab\t\xE3\x80\x80 b a"), (Ids{2, 1, 0}));
  // Pre-tokenizer "whitespace": no lowercasing unless the file asks.
  EXPECT_EQ(Enc(*t, "Ab"), (Ids{3, 1}));
  c.lowercase = true;
  auto u = Build(c);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(Enc(*u, "Ab"), (Ids{2}));
  EXPECT_EQ(Enc(*u, ""), (Ids{}));
}

// --- PLaMo-2 -----------------------------------------------------------------

// Control tokens, the 256 byte tokens (ids 4..259), then scored pieces.
TokenizerConfig Plamo2Config() {
  TokenizerConfig c;
  c.type = TokenizerType::kPlamo2;
  c.tokens = {"<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>",
              "<|plamo:pad|>"};
  c.token_types = {2, 3, 3, 3};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    c.token_types.push_back(6);
  }
  c.scores.assign(c.tokens.size(), 0.0f);
  const std::vector<std::pair<std::string, float>> pieces = {
      {"a", -1},  {"b", -1}, {"ab", -3}, {"abc", -1.5},
      {"xy", -2}, {"x", -1}, {"y", -1}};
  for (const auto& [text, score] : pieces) {
    c.tokens.push_back(text);
    c.token_types.push_back(1);
    c.scores.push_back(score);
  }
  return c;
}

constexpr int32_t kByte0 = 4;  // id of <0x00>

TEST(Plamo2Test, LowestCostSegmentation) {
  auto t = Build(Plamo2Config());
  ASSERT_NE(t, nullptr);
  const int32_t a = 260, b = 261, abc = 263, xy = 264;
  // a + b costs 2e4, "ab" 3e4; "abc" (1.5e4) beats a + b + unknown c.
  EXPECT_EQ(Enc(*t, "ab"), (Ids{a, b}));
  EXPECT_EQ(Enc(*t, "abc"), (Ids{abc}));
  // Tie between "xy" and x + y (2e4 each): the longer token wins.
  EXPECT_EQ(Enc(*t, "xy"), (Ids{xy}));
  // A code point no token covers: its UTF-8 bytes as <0xXX> tokens.
  EXPECT_EQ(Enc(*t,
                "\xC3\xA9"
                "a"),
            (Ids{kByte0 + 0xC3, kByte0 + 0xA9, a}));
  // A leading byte-order mark is dropped; elsewhere it is text.
  EXPECT_EQ(Enc(*t,
                "\xEF\xBB\xBF"
                "a"),
            (Ids{a}));
  EXPECT_EQ(Enc(*t, "a\xEF\xBB\xBF"),
            (Ids{a, kByte0 + 0xEF, kByte0 + 0xBB, kByte0 + 0xBF}));
  // Never adds BOS / EOS.
  EXPECT_EQ(Enc(*t, "a", true), (Ids{a}));
  EXPECT_EQ(Enc(*t, ""), (Ids{}));
}

TEST(Plamo2Test, RoundTrip) {
  auto t = Build(Plamo2Config());
  ASSERT_NE(t, nullptr);
  for (const std::string& x :
       {std::string("ab abc xy\n"),
        std::string("\xE4\xB8\x96 \xF0\x9F\xA6\x99 b"), std::string("yx")}) {
    EXPECT_EQ(t->Decode(Enc(*t, x)), x) << x;
  }
}

TEST(Plamo2Test, MissingByteTokenIsALoadError) {
  TokenizerConfig c = Plamo2Config();
  c.token_types[4 + 0x41] = 1;  // <0x41> no longer a byte token
  auto t = Tokenizer::FromConfig(std::move(c));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

// --- HybriDNA --------------------------------------------------------------

TEST(HybridDnaTest, DnaSpansBecomeKmers) {
  const std::string marker = "\xEE\x80\x80";  // U+E000
  TokenizerConfig c;
  c.type = TokenizerType::kHybridDna;
  c.pre = "gpt-2";
  c.tokens = {"a",
              "b",
              "<dna>",
              "</dna>",
              "<oov>",
              "ACGTAC" + marker,
              "GGAAAA" + marker,
              "ACGTAC"};
  c.token_types = {1, 1, 3, 3, 3, 1, 1, 1};
  c.merges = {"A C", "G T", "AC GT", "ACGT AC"};
  auto t = Build(c);
  ASSERT_NE(t, nullptr);
  // Lowercase DNA is uppercased; the short tail is padded with 'A'.
  EXPECT_EQ(Enc(*t, "a<dna>acgtacGG</dna>b"), (Ids{0, 2, 5, 6, 3, 1}));
  // A k-mer without a token is <oov>; an unclosed span runs to the end.
  EXPECT_EQ(Enc(*t, "<dna>TTTTTT"), (Ids{2, 4}));
  // Outside DNA spans "ACGTAC" is the ordinary BPE token.
  EXPECT_EQ(Enc(*t, "ACGTAC"), (Ids{7}));
  // Decoding drops the k-mer marker.
  EXPECT_EQ(t->Decode({5, 6, 7}), "ACGTACGGAAAAACGTAC");
  // Without <oov> the whole text is BPE.
  c.tokens[4] = "<nope>";
  auto u = Build(c);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(Enc(*u, "ab"), (Ids{0, 1}));
}

// --- Edge cases of the Unigram and RWKV models
// --------------------------------

TEST(RwkvEdgeTest, EveryByteRoundTrips) {
  TokenizerConfig c;
  c.type = TokenizerType::kRwkv;
  static const char* hex = "0123456789abcdef";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("\\x") + hex[b >> 4] + hex[b & 15]);
  }
  c.tokens.push_back("h\\xc3\\xa9");  // id 256: "hé"
  c.token_types.assign(c.tokens.size(), 1);
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, ""), (Ids{}));
  EXPECT_EQ(Enc(*t, "h\xC3\xA9!"), (Ids{256, '!'}));
  const std::string text = "h\xC3\xA9llo \xE4\xB8\x96\n\t\xF0\x9F\xA6\x99";
  EXPECT_EQ(t->Decode(Enc(*t, text)), text);
}

TEST(UnigramEdgeTest, EmptyUnicodeAndUnknown) {
  TokenizerConfig c;
  c.type = TokenizerType::kUnigram;
  c.tokens = {"<pad>", "</s>", "<unk>", kSp, "\xE4\xB8\x96", "a"};
  c.token_types = {3, 3, 2, 1, 1, 1};
  c.scores = {0, 0, 0, -1, -1, -1};
  auto t = Build(std::move(c));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(*t, ""), (Ids{}));
  EXPECT_EQ(Enc(*t, "", true), (Ids{1}));  // only EOS
  // No space prefix by default; unknown characters in a row: one <unk>.
  EXPECT_EQ(Enc(*t,
                "\xE4\xB8\x96"
                "a"),
            (Ids{4, 5}));
  EXPECT_EQ(Enc(*t,
                "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99"
                "a"),
            (Ids{2, 5}));
  EXPECT_EQ(t->Decode(Enc(*t, "a \xE4\xB8\x96")), "a \xE4\xB8\x96");
}

// --- Hand-written llama.cpp splitters ---------------------------------------

Pieces Split(const std::string& pre, const std::string& text) {
  auto spec = tokenizer_internal::PreTokenizerSpecFor(pre);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  auto pt = tokenizer_internal::Pretokenizer::Create(spec->patterns);
  EXPECT_TRUE(pt.ok()) << pt.status();
  if (!pt.ok()) return {};
  std::vector<absl::string_view> pieces;
  EXPECT_TRUE((*pt)->Split(text, &pieces).ok());
  return Pieces(pieces.begin(), pieces.end());
}

TEST(CustomSplitTest, KimiK2) {
  // Han runs alone; a word is any run of non-Han letters (case does not
  // split it) with an optional contraction; digits by three.
  EXPECT_EQ(Split("kimi-k2",
                  "\xE4\xBD\xA0\xE5\xA5\xBD"
                  "getUserName it's"),
            (Pieces{"\xE4\xBD\xA0\xE5\xA5\xBD", "getUserName", " it's"}));
  EXPECT_EQ(Split("kimi-k2",
                  "abc\xE4\xB8\xAD"
                  "12345  \n\nx!?"),
            (Pieces{"abc", "\xE4\xB8\xAD", "123", "45", "  \n\n", "x", "!?"}));
  EXPECT_EQ(Split("kimi-k2", " \xE4\xB8\xAD"), (Pieces{" ", "\xE4\xB8\xAD"}));
}

TEST(CustomSplitTest, AfmoeDigitGroups) {
  // Leading len % 3 digits, then groups of three; CJK / Thai runs alone.
  EXPECT_EQ(Split("afmoe", "1234567"), (Pieces{"1", "234", "567"}));
  EXPECT_EQ(Split("afmoe", "x12345 y"), (Pieces{"x", "12", "345", " y"}));
  EXPECT_EQ(Split("afmoe",
                  "ab\xE0\xB9\x80\xE0\xB9\x84"
                  "cd"),
            (Pieces{"ab", "\xE0\xB9\x80\xE0\xB9\x84", "cd"}));
}

}  // namespace
}  // namespace ckv
