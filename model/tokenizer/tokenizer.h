// Tokenizer built from GGUF tokenizer metadata. Reproduces llama.cpp's
// tokenization (llama-vocab.cpp) for SentencePiece-style vocabularies
// (tokenizer.ggml.model "llama"), BPE vocabularies ("gpt2" under every
// tokenizer.ggml.pre llama.cpp knows, "gemma4", "whitespace"), WordPiece
// ("bert"), Unigram ("t5") and RWKV ("rwkv"), including special-token
// partitioning, BOS/EOS rules and the end-of-generation set; PLaMo-2
// ("plamo2") and HybriDNA ("hybriddna"). A vocabulary-less model ("none",
// "no_vocab") fails to load with UNIMPLEMENTED, as do unknown models.
//
// Thread safety: a built Tokenizer is immutable; all const methods may be
// called concurrently. StreamingDetokenizer is per stream (not thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/gguf/gguf.h"

namespace ckv {

enum class TokenizerType {
  kSentencePiece,  // tokenizer.ggml.model == "llama"
  kBpe,            // tokenizer.ggml.model == "gpt2"
  kGemma4,         // "gemma4": BPE over raw UTF-8, spaces as U+2581
  kUnigram,        // "t5"
  kRwkv,           // "rwkv"
  kWordPiece,      // "bert"
  kPlamo2,         // "plamo2"
  // "hybriddna": BPE, with <dna>...</dna> spans as 6-mer tokens
  kHybridDna,
  // "whitespace": text split at whitespace (dropped), each segment lowercased
  // per tokenizer.ggml.normalizer.lowercase, then BPE-encoded
  kWhitespaceBpe,
};

// Everything a Tokenizer is built from. FromGguf fills it from metadata;
// tests and fuzzers can build small in-memory vocabularies directly. Unset
// optionals take llama.cpp's defaults for the type (SPM: bos 1, eos 2, unk 0,
// add_bos, add_space_prefix; BPE: bos = eos = 11, no BOS unless the
// pre-tokenizer says so; gemma4: none, BOS always added; Unigram: eos 1,
// unk 2, add_eos; RWKV: none; WordPiece: bos ([CLS]) 101, unk 100, sep
// ([SEP]) 102, add_special always gives [CLS] ... [SEP]; PLaMo-2: bos 1, eos
// 2, unk 0, never added; ids out of range are treated as unset).
struct TokenizerConfig {
  TokenizerType type = TokenizerType::kSentencePiece;
  std::string pre;  // BPE pre-tokenizer ("" = "default"; gemma4: ignored)
  std::vector<std::string> tokens;   // id -> text
  std::vector<float> scores;         // empty, or one per token
  std::vector<int32_t> token_types;  // empty (all normal), or GGUF types
  std::vector<std::string> merges;   // BPE: "left right", rank = index
  std::optional<int64_t> bos_id, eos_id, unk_id, eot_id, eom_id, sep_id;
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id;
  std::optional<int64_t> fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  // Unigram normalization (tokenizer.ggml.remove_extra_whitespaces,
  // tokenizer.ggml.precompiled_charsmap).
  std::optional<bool> remove_extra_whitespaces;
  std::vector<uint8_t> precompiled_charsmap;
  // BERT normalization (tokenizer.ggml.normalizer.lowercase / strip_accents;
  // WordPiece and "whitespace"). strip_accents defaults to lowercase.
  std::optional<bool> lowercase, strip_accents;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* keys. Errors (INVALID_ARGUMENT / NOT_FOUND /
  // UNIMPLEMENTED) name the offending key. The result does not reference
  // `file` after returning.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(
      const gguf::GgufFile& file);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromConfig(
      TokenizerConfig config);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` as llama.cpp's llama_tokenize would produce them.
  // add_special: prepend BOS / append EOS per add_bos() / add_eos().
  // parse_special: text matching a control token (e.g. "<|eot_id|>") becomes
  // that token; user-defined tokens are always matched, as in llama.cpp.
  // INVALID_ARGUMENT when `text` is not valid UTF-8 (or exceeds 256 MiB);
  // RESOURCE_EXHAUSTED if the pre-tokenizer regex hits a PCRE2 limit.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special,
                                              bool parse_special) const;

  // Raw bytes of one token: SPM "▁" -> " ", "<0xXX>" -> that byte; BPE
  // byte-level characters -> bytes. Control and unknown tokens give their
  // text when render_special, else "" (llama.cpp's special=false, as its
  // server prints). Out-of-range ids and unused tokens give "".
  std::string TokenToPiece(int32_t id, bool render_special = true) const;

  // Concatenated pieces. No space cleanup and no leading-space removal, so
  // for SPM with add_space_prefix Decode(Encode(x)) == " " + x. The result may
  // be invalid UTF-8 if `ids` ends inside a character (see
  // StreamingDetokenizer for text that must be valid).
  std::string Decode(absl::Span<const int32_t> ids,
                     bool render_special = true) const;

  TokenizerType type() const;
  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when none
  int32_t eos_id() const;  // -1 when none
  int32_t eot_id() const;  // -1 when none
  int32_t unk_id() const;  // -1 when none
  bool add_bos() const;
  bool add_eos() const;
  // True for EOS, EOT, EOM, FIM pad/repo/file-separator and the tokens
  // llama.cpp treats as end of generation by text (<|eot_id|>, <|im_end|>,
  // <|end|>, <end_of_turn>, <|endoftext|>, <turn|>, ...), with its exceptions
  // (<|end|> is not EOG next to <|return|>/<|call|>; </s> is not next to
  // <|tool_response>).
  bool IsEndOfGeneration(int32_t id) const;
  // Sorted ids of the end-of-generation set.
  const std::vector<int32_t>& eog_ids() const;
  // True for control and unknown tokens (hidden when !render_special).
  bool IsControl(int32_t id) const;
  // The vocabulary text of `id` ("" when out of range).
  absl::string_view TokenText(int32_t id) const;

  struct Impl;  // opaque; defined in tokenizer_impl.h

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text that is always valid UTF-8 and never
// splits a character: bytes of an incomplete trailing character are held back
// until a later token completes it. Ill-formed bytes are replaced by U+FFFD
// (one per byte that cannot start a character), so the concatenation of all
// outputs equals Decode(ids) whenever that is valid UTF-8.
class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer,
                                bool render_special = true);

  // Text completed by `id` (possibly empty).
  std::string Push(int32_t id);
  // Emits whatever is held back (an incomplete character becomes U+FFFD) and
  // resets the stream.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;  // bytes of an incomplete trailing character
};

}  // namespace ckv
