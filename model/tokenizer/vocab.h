// Internal vocabulary tables shared by the SentencePiece and BPE algorithms.
// Not part of the public API (see tokenizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace ckv::tokenizer_internal {

// Token attributes, a bit set as in llama.cpp (a token found by text to be an
// end-of-generation marker gets kAttrControl added to its GGUF type).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// Maps a GGUF tokenizer.ggml.token_type value to attributes.
uint32_t AttrFromGgufType(int64_t type);

// Token texts, scores and attributes plus a text -> id index. The index holds
// views into `text`, so a Vocab must not be copied (moving is fine: vector
// moves keep element addresses).
struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<uint32_t> attr;
  absl::flat_hash_map<absl::string_view, int32_t> index;

  Vocab() = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;

  int32_t size() const { return static_cast<int32_t>(text.size()); }
  bool Valid(int32_t id) const { return id >= 0 && id < size(); }
  bool Has(int32_t id, uint32_t attr_mask) const {
    return Valid(id) && (attr[id] & attr_mask) != 0;
  }
  // Id of the token whose text is exactly `s`, or -1.
  int32_t Find(absl::string_view s) const {
    auto it = index.find(s);
    return it == index.end() ? -1 : it->second;
  }
};

// BPE merge ranks: (left, right) -> rank, the index of the merge rule in
// tokenizer.ggml.merges. Keys are views into an owned arena.
class MergeRanks {
 public:
  MergeRanks() = default;
  MergeRanks(const MergeRanks&) = delete;
  MergeRanks& operator=(const MergeRanks&) = delete;

  // Parses rules "left right" (split at the first space after position 0,
  // like llama.cpp; a rule without one becomes ("", "")). A repeated pair
  // keeps its first (lowest) rank.
  void Build(const std::vector<std::string>& rules);

  // Rank of merging `left` with `right`, or -1.
  int Find(absl::string_view left, absl::string_view right) const {
    auto it = ranks_.find(Key(left, right));
    return it == ranks_.end() ? -1 : it->second;
  }
  size_t size() const { return ranks_.size(); }

 private:
  using Key = std::pair<absl::string_view, absl::string_view>;
  std::string arena_;
  absl::flat_hash_map<Key, int> ranks_;
};

}  // namespace ckv::tokenizer_internal
