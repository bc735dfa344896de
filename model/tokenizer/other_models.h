// Unigram (tokenizer.ggml.model "t5"), RWKV ("rwkv"), WordPiece ("bert") and
// PLaMo-2 ("plamo2") encoders, reproducing llama.cpp's (llama-vocab.cpp). Not
// part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/vocab.h"

namespace ckv::tokenizer_internal {

// Encodes one fragment of raw text (special tokens already split off).
class OtherModel {
 public:
  virtual ~OtherModel() = default;
  // Appends ids to *out. INVALID_ARGUMENT if the vocabulary's tables turn
  // out to be corrupt while encoding (e.g. a charsmap index out of range).
  virtual absl::Status Encode(absl::string_view text,
                              std::vector<int32_t>* out) const = 0;
};

struct UnigramOptions {
  bool add_space_prefix = false;          // tokenizer.ggml.add_space_prefix
  bool remove_extra_whitespaces = false;  // tokenizer.ggml.remove_extra_...
  int32_t unk_id = -1;
};

// Viterbi segmentation maximizing the sum of token scores (user-defined
// tokens score 0; a character no token covers costs min score - 10 and
// becomes `unk_id`, consecutive unknowns merged into one) after
// SentencePiece normalization: the precompiled charsmap (XOR-compressed
// double array + replacement strings; empty = none), spaces -> U+2581.
// `vocab` must outlive the model. INVALID_ARGUMENT for a malformed charsmap.
absl::StatusOr<std::unique_ptr<OtherModel>> MakeUnigram(
    const Vocab* vocab, const UnigramOptions& options,
    const std::vector<uint8_t>& charsmap);

// Greedy longest match over the byte strings of RWKV's escaped token texts
// ("\\n", "\\t", "\\r", "\\xHH", "\\<c>"); a byte no token starts with is
// skipped. `vocab` must outlive the model.
std::unique_ptr<OtherModel> MakeRwkv(const Vocab* vocab);

struct WordPieceOptions {
  bool lowercase = true;      // tokenizer.ggml.normalizer.lowercase
  bool strip_accents = true;  // tokenizer.ggml.normalizer.strip_accents
  int32_t unk_id = -1;        // must be a valid id
};

// BERT WordPiece (see wordpiece.cc): words from BERT's normalization and
// splitting, each encoded by greedy longest match over U+2581 + word; a word
// with a position no token covers becomes `unk_id`. `vocab` must outlive the
// model.
std::unique_ptr<OtherModel> MakeWordPiece(const Vocab* vocab,
                                          const WordPieceOptions& options);

// PLaMo-2 (see plamo2.cc): lowest-cost segmentation by token scores with
// <0xXX> byte fallback. INVALID_ARGUMENT when a byte token is missing.
// `vocab` must outlive the model.
absl::StatusOr<std::unique_ptr<OtherModel>> MakePlamo2(const Vocab* vocab);

// The bytes an RWKV token text stands for (llama.cpp's unescaping).
std::string UnescapeRwkvToken(absl::string_view escaped);

}  // namespace ckv::tokenizer_internal
