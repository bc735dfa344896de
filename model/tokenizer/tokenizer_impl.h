// Internal state of ckv::Tokenizer, shared by tokenizer.cc (encode/decode)
// and tokenizer_load.cc (construction). Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/merge.h"
#include "model/tokenizer/other_models.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/vocab.h"

namespace ckv {

struct Tokenizer::Impl {
  TokenizerType type = TokenizerType::kSentencePiece;
  tokenizer_internal::Vocab vocab;
  tokenizer_internal::MergeRanks ranks;                      // BPE only
  std::unique_ptr<tokenizer_internal::Pretokenizer> pretok;  // BPE only
  std::unique_ptr<tokenizer_internal::SpmMerger> spm;
  std::unique_ptr<tokenizer_internal::BpeMerger> bpe;

  // TokenToPiece(id, /*render_special=*/true) for every id.
  std::vector<std::string> pieces;
  // Control / user-defined / unknown ids, longest text first (ties: lower id
  // first): the order in which Encode partitions text on special tokens.
  std::vector<int32_t> special_ids;
  std::vector<int32_t> eog_ids;  // sorted

  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool escape_whitespaces = false;  // BPE: ' ' -> U+2581 (gemma4)
  int32_t sep = -1;                 // WordPiece: appended by add_special
  bool lowercase = false;           // kWhitespaceBpe segments
  int32_t dna_oov = -1;             // kHybridDna: ids above "<oov>" are k-mers
  // Unigram, RWKV and WordPiece encoders; see other_models.h.
  std::unique_ptr<tokenizer_internal::OtherModel> other;
};

namespace tokenizer_internal {
// The render_special=true piece of `id` (see Tokenizer::TokenToPiece).
std::string ComputePiece(const Tokenizer::Impl& impl, int32_t id);
}  // namespace tokenizer_internal

}  // namespace ckv
