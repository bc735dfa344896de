#include "model/grammar/token_index.h"

#include <algorithm>
#include <mutex>
#include <numeric>
#include <utility>

#include "absl/hash/hash.h"

namespace ckv::grammar {

TokenIndex::TokenIndex(std::vector<std::string> token_bytes,
                       std::vector<int32_t> eog_ids)
    : bytes_(std::move(token_bytes)), eog_ids_(std::move(eog_ids)) {
  std::sort(eog_ids_.begin(), eog_ids_.end());
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (!bytes_[id].empty() && bytes_[id].size() <= 65535 && !IsEog(id)) {
      order.push_back(id);
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
  });
  // Preorder construction from the sorted strings: pop the path to the
  // common prefix with the previous string, push the rest.
  std::vector<uint8_t> byte_ = {0};
  std::vector<int32_t> depth_ = {0}, end_ = {0};
  std::vector<int32_t> node_of_token;  // parallel to `order`
  std::vector<int32_t> path{0};        // node per depth
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < s.size() && common < prev->size() &&
             s[common] == (*prev)[common]) {
        ++common;
      }
    }
    while (path.size() > common + 1) {
      end_[path.back()] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[d]));
      depth_.push_back(static_cast<int32_t>(d + 1));
      end_.push_back(0);
    }
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(s.size()));
    node_of_token.push_back(path.back());
    prev = &s;
  }
  while (!path.empty()) {
    end_[path.back()] = static_cast<int32_t>(byte_.size());
    path.pop_back();
  }
  // Tokens per node (CSR); `order` is already in node order.
  std::vector<int32_t> token_start(byte_.size() + 1, 0);
  for (int32_t n : node_of_token) ++token_start[n + 1];
  std::partial_sum(token_start.begin(), token_start.end(), token_start.begin());
  tokens_.resize(order.size());
  std::vector<int32_t> fill(token_start.begin(), token_start.end() - 1);
  for (size_t k = 0; k < order.size(); ++k) {
    tokens_[fill[node_of_token[k]]++] = order[k];
  }
  nodes_.resize(byte_.size() + 1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const bool real = i < byte_.size();
    nodes_[i] = {real ? end_[i] : 0, token_start[i],
                 static_cast<uint16_t>(real ? depth_[i] : 0),
                 real ? byte_[i] : uint8_t{0}};
  }
}

bool TokenIndex::IsEog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

std::shared_ptr<const TokenIndex> TokenIndex::For(const Tokenizer& tokenizer) {
  struct Entry {
    const Tokenizer* tokenizer;
    size_t fingerprint;
    std::shared_ptr<const TokenIndex> index;
  };
  static std::mutex mu;
  static std::vector<Entry>* cache = new std::vector<Entry>();
  const int32_t n = tokenizer.vocab_size();
  size_t fingerprint = absl::HashOf(n);
  for (int32_t i = 0; i < n; i += std::max(1, n / 64)) {
    fingerprint = absl::HashOf(fingerprint, tokenizer.TokenText(i));
  }
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : *cache) {
    if (e.tokenizer == &tokenizer && e.fingerprint == fingerprint) {
      return e.index;
    }
  }
  std::vector<std::string> pieces(n);
  for (int32_t i = 0; i < n; ++i) {
    if (!tokenizer.IsControl(i)) pieces[i] = tokenizer.TokenToPiece(i, false);
  }
  auto index = std::make_shared<const TokenIndex>(std::move(pieces),
                                                  tokenizer.eog_ids());
  if (cache->size() >= 4) cache->erase(cache->begin());
  cache->push_back({&tokenizer, fingerprint, index});
  return index;
}

}  // namespace ckv::grammar
