// WordPiece encoder (tokenizer.ggml.model "bert"), as llama.cpp's WPM
// tokenizer: BERT normalization and splitting, then greedy longest match per
// word over a vocabulary where word-initial pieces start with U+2581 (the
// GGUF form of BERT's vocabulary: "##" continuations lose the "##", other
// pieces gain the U+2581 prefix).

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer/other_models.h"
#include "model/tokenizer/unicode_props.h"
#include "model/tokenizer/utf8.h"

namespace ckv::tokenizer_internal {
namespace {

constexpr absl::string_view kWordStart = "\xE2\x96\x81";  // U+2581

// CJK ideograph blocks BERT isolates as one-character words (the ranges of
// HF tokenizers' is_chinese_char, including its 0x2B920 typo).
bool IsChineseChar(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

class WordPiece : public OtherModel {
 public:
  WordPiece(const Vocab* vocab, const WordPieceOptions& options)
      : vocab_(vocab), options_(options) {
    for (const std::string& t : vocab->text) {
      max_len_ = std::max(max_len_, t.size());
    }
  }

  absl::Status Encode(absl::string_view text,
                      std::vector<int32_t>* out) const override {
    for (const std::string& word : Words(text)) EncodeWord(word, out);
    return absl::OkStatus();
  }

 private:
  // BERT's basic tokenization: whitespace separates words; NUL, U+FFFD and
  // control characters are dropped; with strip_accents each character is
  // replaced by its decomposition's base and marks are dropped; punctuation,
  // ASCII symbols and CJK ideographs are words of their own.
  std::vector<std::string> Words(absl::string_view text) const {
    std::vector<std::string> words(1);
    auto finish_word = [&words] {
      if (!words.back().empty()) words.emplace_back();
    };
    size_t i = 0;
    while (i < text.size()) {
      uint32_t cp = 0xFFFD;
      const int len = DecodeUtf8Char(text.substr(i), &cp);
      i += len > 0 ? static_cast<size_t>(len) : 1;
      if (len <= 0) cp = 0xFFFD;
      if (options_.strip_accents) cp = NfdBase(cp);
      if (IsUnicodeWhitespace(cp)) {
        finish_word();
        continue;
      }
      const uint32_t cats = CategoryBits(cp);
      if (cp == 0 || cp == 0xFFFD || (cats & kCatControl)) continue;
      if (options_.strip_accents && (cats & kCatMark)) continue;
      const uint32_t shown = options_.lowercase ? UnicodeToLower(cp) : cp;
      if ((cats & kCatPunctuation) || (cp < 0x7F && (cats & kCatSymbol)) ||
          IsChineseChar(cp)) {
        finish_word();
        AppendUtf8(shown, &words.back());
        words.emplace_back();
      } else {
        AppendUtf8(shown, &words.back());
      }
    }
    if (words.back().empty()) words.pop_back();
    return words;
  }

  // Greedy longest match from the left over U+2581 + word; if some position
  // matches no token the whole word becomes the unknown token.
  void EncodeWord(const std::string& word, std::vector<int32_t>* out) const {
    std::string marked(kWordStart);
    marked += word;
    const size_t n = marked.size();
    const size_t start = out->size();
    for (size_t i = 0; i < n;) {
      int32_t id = -1;
      size_t j = std::min(n, i + max_len_);
      for (; j > i; --j) {
        id = vocab_->Find(absl::string_view(marked).substr(i, j - i));
        if (id >= 0) break;
      }
      if (id < 0) {
        out->resize(start);
        break;
      }
      out->push_back(id);
      i = j;
    }
    if (out->size() == start) out->push_back(options_.unk_id);
  }

  const Vocab* vocab_;
  WordPieceOptions options_;
  size_t max_len_ = 0;
};

}  // namespace

std::unique_ptr<OtherModel> MakeWordPiece(const Vocab* vocab,
                                          const WordPieceOptions& options) {
  return std::make_unique<WordPiece>(vocab, options);
}

}  // namespace ckv::tokenizer_internal
