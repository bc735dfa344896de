// StreamingDetokenizer: UTF-8-safe incremental decoding.

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace ckv {
namespace {

// Moves the longest decodable prefix of *pending to *out, replacing each
// ill-formed byte by U+FFFD. With `final`, an incomplete trailing character
// is replaced too; otherwise it stays in *pending.
void Drain(std::string* pending, bool final, std::string* out) {
  const absl::string_view s(*pending);
  size_t i = 0;
  while (i < s.size()) {
    const int len = tokenizer_internal::DecodeUtf8Char(s.substr(i), nullptr);
    if (len > 0) {
      out->append(s.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len == tokenizer_internal::kUtf8Truncated && !final) {
      break;
    } else {
      out->append(tokenizer_internal::kReplacementChar.data(),
                  tokenizer_internal::kReplacementChar.size());
      // A truncated tail becomes a single replacement character.
      i = len == tokenizer_internal::kUtf8Truncated ? s.size() : i + 1;
    }
  }
  pending->erase(0, i);
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer,
                                           bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  pending_ += tokenizer_.TokenToPiece(id, render_special_);
  std::string out;
  Drain(&pending_, /*final=*/false, &out);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out;
  Drain(&pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace ckv
