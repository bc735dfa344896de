// libFuzzer target: Encode + Decode + streaming decode of arbitrary bytes
// with small in-memory vocabularies: SentencePiece, byte-level BPE under one
// pre-tokenizer of each regex family (kimi-k2 and afmoe included), Gemma 4
// (raw UTF-8 BPE), Unigram, RWKV, WordPiece, PLaMo-2, the "whitespace" model
// and HybriDNA. The first input byte picks the tokenizer (bits 0-2 and 5-7) and
// the add_special (bit 3) / parse_special (bit 4) flags; the rest is the text.
//
// Checked invariants (violations trap): Encode fails only with
// INVALID_ARGUMENT and only on invalid UTF-8; ids are in range; without
// special handling Decode(Encode(x)) reproduces x (SPM: with the space
// prefix; SPM and Gemma 4: only for text without a literal U+2581; not for
// Unigram, whose unknown characters become <unk>); streamed text is valid
// UTF-8 and equals Decode when that is.
//
// Seeds: when CLUSTERKV_FUZZ_SEED_DIR names a folder, LLVMFuzzerInitialize
// turns every test string of the fixture files scripts/fuzz.sh copied there
// (fixture_*.inp, llama.cpp's strings for each vocabulary) into one seed per
// tokenizer.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace {

using ckv::Tokenizer;
using ckv::TokenizerConfig;
using ckv::TokenizerType;

constexpr char kSp[] = "\xE2\x96\x81";  // U+2581

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

std::unique_ptr<Tokenizer> MustBuild(TokenizerConfig c) {
  auto t = Tokenizer::FromConfig(std::move(c));
  Check(t.ok());
  return std::move(*t);
}

std::unique_ptr<Tokenizer> SpmTokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kSentencePiece;
  c.tokens = {"<unk>", "<s>", "</s>"};
  c.token_types = {2, 3, 3};
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    c.token_types.push_back(6);
  }
  for (const char* w : {"a", "b", "ab", "ba", "\xC3\xA4", "<", ">"}) {
    c.tokens.push_back(w);
    c.tokens.push_back(std::string(kSp) + w);
    c.token_types.insert(c.token_types.end(), {1, 1});
  }
  c.tokens.push_back(kSp);
  c.token_types.push_back(1);
  c.tokens.push_back("[UD]");
  c.token_types.push_back(4);
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    c.scores.push_back(-static_cast<float>(i % 7));
  }
  return MustBuild(std::move(c));
}

// Byte-level vocabulary: all 256 byte characters plus a few merges, then
// `extra` tokens (typed control).
std::unique_ptr<Tokenizer> BpeTokenizer(
    const char* pre, TokenizerType type = TokenizerType::kBpe,
    const std::vector<std::string>& extra = {}) {
  TokenizerConfig c;
  c.type = type;
  c.pre = pre;
  // Same mapping as GPT-2's bytes_to_unicode.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                      (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = keep ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    c.tokens.push_back(s);
  }
  c.merges = {"\xC4\xA0 a",
              "a b",
              "\xC4\xA0"
              "a b",
              "\xC4\xA0 \xC4\xA0",
              "1 2",
              "\xC3\x83 \xC2\xA4"};
  for (const char* t : {"\xC4\xA0"
                        "a",
                        "ab",
                        "\xC4\xA0"
                        "ab",
                        "\xC4\xA0\xC4\xA0", "12", "\xC3\x83\xC2\xA4"}) {
    c.tokens.push_back(t);
  }
  const size_t first_extra = c.tokens.size();
  c.tokens.insert(c.tokens.end(), extra.begin(), extra.end());
  c.tokens.push_back("<|eot_id|>");
  c.tokens.push_back("[UD]");
  c.token_types.assign(c.tokens.size(), 1);
  for (size_t i = first_extra; i < first_extra + extra.size(); ++i) {
    c.token_types[i] = 3;
  }
  c.token_types[c.tokens.size() - 2] = 3;
  c.token_types[c.tokens.size() - 1] = 4;
  c.bos_id = static_cast<int64_t>(c.tokens.size() - 2);
  c.eos_id = c.bos_id;
  return MustBuild(std::move(c));
}

std::string ByteTokenName(int b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

// Gemma 4 style: <0xXX> byte tokens, U+2581 spaces, raw UTF-8 merges.
std::unique_ptr<Tokenizer> Gemma4Tokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kGemma4;
  c.tokens = {"<pad>", "<eos>", "<bos>", "<unk>"};
  c.token_types = {3, 3, 3, 2};
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(ByteTokenName(b));
    c.token_types.push_back(6);
  }
  for (const std::string& t :
       {std::string(kSp), std::string("a"), std::string(kSp) + "a",
        std::string("\n\n"), std::string("\xC3\xA4"), std::string("<turn|>"),
        std::string("[UD]")}) {
    c.tokens.push_back(t);
    c.token_types.push_back(1);
  }
  c.token_types[c.token_types.size() - 2] = 3;
  c.token_types[c.token_types.size() - 1] = 4;
  c.merges = {std::string(kSp) + " a", "\n \n"};
  c.bos_id = 2;
  c.eos_id = 1;
  return MustBuild(std::move(c));
}

std::unique_ptr<Tokenizer> UnigramTokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kUnigram;
  c.tokens = {"<pad>", "</s>", "<unk>", kSp, "[UD]"};
  c.token_types = {3, 3, 2, 1, 4};
  c.scores = {0, 0, 0, -2, 0};
  for (const char* w : {"a", "b", "ab", "\xC3\xA4", "1"}) {
    c.tokens.push_back(w);
    c.tokens.push_back(std::string(kSp) + w);
    c.token_types.insert(c.token_types.end(), {1, 1});
    c.scores.insert(c.scores.end(), {-3.5f, -1.25f});
  }
  c.add_space_prefix = true;
  return MustBuild(std::move(c));
}

// RWKV: every byte as an escaped token, plus a few longer ones.
std::unique_ptr<Tokenizer> RwkvTokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kRwkv;
  static const char* hex = "0123456789abcdef";
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(std::string("\\x") + hex[b >> 4] + hex[b & 15]);
  }
  for (const char* t : {"ab", "\\n\\n", "a b", "\\x00\\xff"}) {
    c.tokens.push_back(t);
  }
  c.token_types.assign(c.tokens.size(), 1);
  return MustBuild(std::move(c));
}

// WordPiece: U+2581-prefixed word pieces and continuations.
std::unique_ptr<Tokenizer> WordPieceTokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kWordPiece;
  c.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[UD]"};
  c.token_types = {3, 2, 3, 3, 4};
  for (const char* w : {"a", "b", "ab", "\xC3\xA4", ",", "1", "\xE4\xB8\x96"}) {
    c.tokens.push_back(w);
    c.tokens.push_back(std::string(kSp) + w);
    c.token_types.insert(c.token_types.end(), {1, 1});
  }
  c.bos_id = 2;
  c.sep_id = 3;
  c.unk_id = 1;
  return MustBuild(std::move(c));
}

// PLaMo-2: <0xXX> byte tokens plus scored pieces.
std::unique_ptr<Tokenizer> Plamo2Tokenizer() {
  TokenizerConfig c;
  c.type = TokenizerType::kPlamo2;
  c.tokens = {"<|plamo:unk|>", "<|plamo:bos|>", "<|plamo:eos|>", "[UD]"};
  c.token_types = {2, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    c.tokens.push_back(ByteTokenName(b));
    c.token_types.push_back(6);
  }
  c.scores.assign(c.tokens.size(), 0.0f);
  for (const char* w : {"a", "b", "ab", "\xC3\xA4", " a", "\n\n", "aaa"}) {
    c.tokens.push_back(w);
    c.token_types.push_back(1);
    c.scores.push_back(-static_cast<float>(c.tokens.size() % 5) - 0.5f);
  }
  return MustBuild(std::move(c));
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const int n = c < 0x80                   ? 1
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

void CheckTokenizer(const Tokenizer& tok, const std::string& text,
                    bool add_special, bool parse_special) {
  auto ids = tok.Encode(text, add_special, parse_special);
  if (!ids.ok()) {
    Check(ids.status().code() == absl::StatusCode::kInvalidArgument);
    Check(!IsValidUtf8(text));
    return;
  }
  Check(IsValidUtf8(text));
  for (int32_t id : *ids) Check(id >= 0 && id < tok.vocab_size());
  const std::string decoded = tok.Decode(*ids);
  // Round trip, unless special tokens are involved or (SPM, Gemma 4) the
  // text holds U+2581 itself, which decodes to a space like the escaped
  // spaces; Unigram maps unknown characters to <unk>; WordPiece and
  // "whitespace" normalize; HybriDNA rewrites DNA spans; PLaMo-2 drops a
  // leading byte-order mark.
  const TokenizerType type = tok.type();
  const bool spm = type == TokenizerType::kSentencePiece;
  const bool escapes = spm || type == TokenizerType::kGemma4;
  const bool normalizes =
      type == TokenizerType::kUnigram || type == TokenizerType::kWordPiece ||
      type == TokenizerType::kWhitespaceBpe ||
      (type == TokenizerType::kHybridDna &&
       text.find("<dna>") != std::string::npos) ||
      (type == TokenizerType::kPlamo2 && text.rfind("\xEF\xBB\xBF", 0) == 0);
  if (!add_special && !parse_special && !normalizes &&
      text.find("[UD]") == std::string::npos &&
      !(escapes && text.find(kSp) != std::string::npos)) {
    Check(decoded == ((spm && !text.empty()) ? " " + text : text));
  }
  ckv::StreamingDetokenizer stream(tok);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  Check(IsValidUtf8(streamed));
  if (IsValidUtf8(decoded)) Check(streamed == decoded);
}

const std::vector<const Tokenizer*>& Tokenizers() {
  static const auto* all = [] {
    auto* v = new std::vector<const Tokenizer*>();
    v->push_back(SpmTokenizer().release());
    for (const char* pre :
         {"llama-bpe",   "qwen2",          "gpt-2",     "default",
          "starcoder",   "deepseek-coder", "falcon",    "deepseek-llm",
          "deepseek-v3", "gpt-4o",         "tekken",    "superbpe",
          "tiny_aya",    "qwen35",         "poro-chat", "chameleon",
          "exaone-moe",  "bailingmoe",     "youtu",     "jais-2",
          "kimi-k2",     "afmoe"}) {
      v->push_back(BpeTokenizer(pre).release());
    }
    v->push_back(Gemma4Tokenizer().release());
    v->push_back(UnigramTokenizer().release());
    v->push_back(RwkvTokenizer().release());
    v->push_back(WordPieceTokenizer().release());
    v->push_back(Plamo2Tokenizer().release());
    v->push_back(
        BpeTokenizer("whitespace", TokenizerType::kWhitespaceBpe).release());
    v->push_back(BpeTokenizer("gpt-2", TokenizerType::kHybridDna,
                              {"<dna>", "</dna>", "<oov>", "ACGTAC\xEE\x80\x80",
                               "AAAAAA\xEE\x80\x80"})
                     .release());
    return v;
  }();
  return *all;
}

// Mode byte for tokenizer `index` and the given flags.
uint8_t ModeByte(size_t index, bool add_special, bool parse_special) {
  return static_cast<uint8_t>((index & 7) | ((index >> 3) << 5) |
                              (add_special ? 8 : 0) | (parse_special ? 16 : 0));
}

// The test strings of one llama.cpp .inp file.
std::vector<std::string> FixtureStrings(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < all.size();) {
    const size_t next = all.find(sep, pos);
    out.push_back(all.substr(
        pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("CLUSTERKV_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  std::error_code ec;
  std::vector<std::string> strings;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("fixture_", 0) != 0 || entry.path().extension() != ".inp") {
      continue;
    }
    for (std::string& s : FixtureStrings(entry.path().string())) {
      strings.push_back(std::move(s));
    }
  }
  const size_t n = Tokenizers().size();
  for (size_t i = 0; i < strings.size(); ++i) {
    const size_t t = i % n;  // spread the strings over the tokenizers
    for (bool special : {false, true}) {
      const std::string path = std::string(dir) + "/tok_seed_" +
                               std::to_string(i) + (special ? "_s" : "");
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) continue;  // the fuzzer still runs, just unseeded
      const uint8_t mode =
          ModeByte(special ? (t + 1) % n : t, special, special);
      std::fwrite(&mode, 1, 1, f);
      std::fwrite(strings[i].data(), 1, strings[i].size(), f);
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::vector<const Tokenizer*>& all = Tokenizers();
  const size_t index = ((mode & 7) | ((mode >> 5) << 3)) % all.size();
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  CheckTokenizer(*all[index], text, (mode & 8) != 0, (mode & 16) != 0);
  return 0;
}
