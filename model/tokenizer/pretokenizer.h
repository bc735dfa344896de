// Regex pre-tokenizer for byte-level BPE vocabularies, on PCRE2 (UTF + UCP,
// JIT when available). Selected by the GGUF key tokenizer.ggml.pre.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckv::tokenizer_internal {

// Pre-tokenizer settings implied by a tokenizer.ggml.pre name.
struct PreTokenizerSpec {
  std::vector<std::string> patterns;  // applied in order, see Pretokenizer
  bool ignore_merges = false;         // a piece that is a token stays whole
  bool add_bos = false;               // llama.cpp's add_bos default
};

// Returns the spec for `pre` ("" and "default" give llama.cpp's default
// regexes); NOT_FOUND for names this implementation does not know.
absl::StatusOr<PreTokenizerSpec> PreTokenizerSpecFor(absl::string_view pre);

class Pretokenizer {
 public:
  // Compiles the patterns; INVALID_ARGUMENT with PCRE2's message on error.
  static absl::StatusOr<std::unique_ptr<Pretokenizer>> Create(
      const std::vector<std::string>& patterns);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Splits `text` (must be valid UTF-8) into consecutive pieces that cover it
  // exactly. Each pattern in turn splits every piece produced so far into its
  // matches and the gaps between them (a piece is matched as a whole subject,
  // so lookarounds do not see past it); empty matches are ignored.
  // RESOURCE_EXHAUSTED if PCRE2 hits a match limit. Thread-safe.
  absl::Status Split(absl::string_view text,
                     std::vector<absl::string_view>* pieces) const;

 private:
  struct Compiled;
  Pretokenizer() = default;
  std::vector<Compiled*> regexes_;
};

}  // namespace ckv::tokenizer_internal
