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
  // leading into node i, its depth (>= 1, at most 65535: longer tokens
  // are left out), one past its subtree, and the tokens whose bytes end
  // there.
  struct Node {
    int32_t end;          // one past the subtree
    int32_t token_start;  // tokens_[token_start, next node's token_start)
    uint16_t depth;
    uint8_t byte;
  };
  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()) - 1; }
  const Node* nodes() const { return nodes_.data(); }  // num_nodes() + 1
  const int32_t* tokens() const { return tokens_.data(); }
  uint8_t node_byte(int32_t i) const { return nodes_[i].byte; }
  int32_t node_depth(int32_t i) const { return nodes_[i].depth; }
  int32_t subtree_end(int32_t i) const { return nodes_[i].end; }
  const int32_t* tokens_begin(int32_t i) const {
    return tokens_.data() + nodes_[i].token_start;
  }
  const int32_t* tokens_end(int32_t i) const {
    return tokens_.data() + nodes_[i + 1].token_start;
  }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_ids_;  // sorted
  std::vector<Node> nodes_;       // plus a sentinel holding the token count
  std::vector<int32_t> tokens_;
  int32_t max_depth_ = 0;
};

}  // namespace ckv::grammar
