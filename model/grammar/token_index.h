// A vocabulary's byte strings as a trie in preorder, for token masks: a
// walk that skips the subtree of every byte the grammar rejects visits
// only the prefixes the grammar allows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace ckv::grammar {

class TokenIndex {
 public:
  // token_bytes[id]: the bytes token `id` emits ("" for control tokens,
  // which a grammar never allows); eog_ids: end-of-generation tokens,
  // allowed when the grammar accepts.
  TokenIndex(std::vector<std::string> token_bytes,
             std::vector<int32_t> eog_ids);

  // The index of `tokenizer` (pieces without special tokens), built once
  // and shared: cached per tokenizer (by address, vocabulary size and a
  // sample of its texts).
  static std::shared_ptr<const TokenIndex> For(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool IsEog(int32_t id) const;

  // Trie nodes 1..num_nodes()-1 in preorder (0 is the root): the byte
  // leading into node i, its depth (>= 1), one past its subtree, and the
  // tokens whose bytes end there.
  int32_t num_nodes() const { return static_cast<int32_t>(byte_.size()); }
  uint8_t node_byte(int32_t i) const { return byte_[i]; }
  int32_t node_depth(int32_t i) const { return depth_[i]; }
  int32_t subtree_end(int32_t i) const { return end_[i]; }
  const int32_t* tokens_begin(int32_t i) const {
    return tokens_.data() + token_start_[i];
  }
  const int32_t* tokens_end(int32_t i) const {
    return tokens_.data() + token_start_[i + 1];
  }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_ids_;  // sorted
  std::vector<uint8_t> byte_;
  std::vector<int32_t> depth_, end_, token_start_, tokens_;
  int32_t max_depth_ = 0;
};

}  // namespace ckv::grammar
