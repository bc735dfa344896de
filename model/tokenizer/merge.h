// The two merge algorithms, reproducing llama.cpp (llama-vocab.cpp):
// SentencePiece-style bigram merging by token score with byte fallback, and
// byte-level BPE merging by merge rank.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/tokenizer/vocab.h"

namespace ckv::tokenizer_internal {

// A run of bytes in the text being merged; n == 0 once merged away.
struct Symbol {
  int prev;
  int next;
  uint32_t start;
  uint32_t n;
};

// A candidate merge of symbols[left] and symbols[right], valid while both
// still have the lengths recorded here.
struct Bigram {
  int left;
  int right;
  uint32_t left_n;
  uint32_t right_n;
  float score;  // SPM: token score (higher first)
  int rank;     // BPE: merge rank (lower first)
};

// Scratch buffers reused across pieces of one Encode call.
struct MergeWorkspace {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
  std::string word;
};

class SpmMerger {
 public:
  // `vocab` must outlive the merger. Bytes without a <0xXX> (or one-byte)
  // token map to `unk_id`, or are dropped when unk_id < 0.
  SpmMerger(const Vocab* vocab, int32_t unk_id);

  // Appends the ids of `text` (spaces already replaced by U+2581). Symbols
  // start as single UTF-8 characters; adjacent pairs whose concatenation is a
  // token merge, best score first (ties: leftmost); a final symbol that is
  // not a token is emitted as byte tokens.
  void Encode(absl::string_view text, MergeWorkspace* ws,
              std::vector<int32_t>* out) const;

 private:
  void TryAddBigram(absl::string_view text, int left, int right,
                    MergeWorkspace* ws) const;

  const Vocab* vocab_;
  std::array<int32_t, 256> byte_token_;
};

struct BpeOptions {
  bool ignore_merges = false;  // a piece that is a token is emitted whole
  // GPT-2 byte-level encoding; false: raw UTF-8 with <0xXX> byte tokens.
  bool byte_encode = true;
  bool whole_newline_runs = false;  // a "\n..." piece that is a token: whole
};

class BpeMerger {
 public:
  // `vocab` and `ranks` must outlive the merger.
  BpeMerger(const Vocab* vocab, const MergeRanks* ranks, BpeOptions options);

  // Appends the ids of one pre-tokenized piece of raw UTF-8. The piece is
  // byte-level encoded (unless !byte_encode), split into characters, and
  // adjacent pairs merge by lowest rank (ties: leftmost). A final symbol that
  // is not a token falls back to its byte tokens (byte-level: the one-byte
  // token of each byte of its encoded text, as llama.cpp does; raw: <0xXX>),
  // silently skipping bytes without one.
  void EncodePiece(absl::string_view piece, MergeWorkspace* ws,
                   std::vector<int32_t>* out) const;

 private:
  void TryAddBigram(absl::string_view word, int left, int right,
                    MergeWorkspace* ws) const;
  void EmitSymbol(absl::string_view text, std::vector<int32_t>* out) const;

  const Vocab* vocab_;
  const MergeRanks* ranks_;
  BpeOptions options_;
  std::array<int32_t, 256> byte_token_;  // <0xXX> ids (raw mode), or -1
};

}  // namespace ckv::tokenizer_internal
