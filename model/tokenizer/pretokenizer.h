// Regex pre-tokenizer for BPE vocabularies, on PCRE2 (UTF + UCP, JIT when
// available). Selected by the GGUF key tokenizer.ggml.pre.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckv::tokenizer_internal {

// Pre-tokenizer settings implied by a tokenizer.ggml.pre name, as llama.cpp
// (llama-vocab.cpp) sets them.
struct PreTokenizerSpec {
  // Applied in order, see Pretokenizer. Written in llama.cpp's dialect:
  // `\s`, `\S` and `\d` are rewritten by Pretokenizer::Create.
  std::vector<std::string> patterns;
  bool ignore_merges = false;  // a piece that is a token stays whole
  bool add_bos = false;        // llama.cpp's add_bos default
  // GPT-2 byte-level encoding of pieces; false: raw UTF-8 with <0xXX> byte
  // fallback tokens (Gemma 4 style).
  bool byte_encode = true;
  bool escape_whitespaces = false;  // ' ' -> U+2581 before splitting
  // A piece made only of '\n' that is itself a token stays whole (Gemma 4).
  bool whole_newline_runs = false;
  bool force_add_bos = false;   // add_bos is true whatever the file says
  bool no_default_bos = false;  // no BOS unless tokenizer.ggml.bos_token_id
};

// Returns the spec for `pre` ("" and "default" give llama.cpp's default
// regexes); NOT_FOUND for names llama.cpp does not know. The names llama.cpp
// splits with hand-written code (kimi-k2, afmoe) get patterns that split the
// same way.
absl::StatusOr<PreTokenizerSpec> PreTokenizerSpecFor(absl::string_view pre);

// Every name PreTokenizerSpecFor accepts (the names llama.cpp knows), in
// table order.
std::vector<std::string> KnownPreTokenizerNames();

// Rewrites a pattern from llama.cpp's regex dialect (ECMAScript std::regex,
// where `\s` is Unicode White_Space as llama.cpp's tables define it and `\d`
// is ASCII) into an equivalent PCRE2 pattern. Exposed for tests.
std::string AdaptPattern(absl::string_view pattern);

class Pretokenizer {
 public:
  // Adapts and compiles the patterns; INVALID_ARGUMENT with PCRE2's message
  // on error.
  static absl::StatusOr<std::unique_ptr<Pretokenizer>> Create(
      const std::vector<std::string>& patterns);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Splits `text` (must be valid UTF-8) into consecutive pieces that cover it
  // exactly. Each pattern in turn splits every piece produced so far into its
  // matches and the gaps between them (a piece is matched as a whole subject,
  // so lookarounds and `$` do not see past it); an empty match splits the
  // piece at its position, as llama.cpp's std::regex iteration does.
  // RESOURCE_EXHAUSTED if PCRE2 hits a match limit. Thread-safe.
  absl::Status Split(absl::string_view text,
                     std::vector<absl::string_view>* pieces) const;

 private:
  struct Compiled;
  Pretokenizer() = default;
  std::vector<Compiled*> regexes_;
};

}  // namespace ckv::tokenizer_internal
