// The automatic prefix cache (docs/design.md "Prefix cache"): requests
// without a session (Generate, HTTP without x-session-id) whose prompt begins
// with whole blocks that an earlier request of the same tenant prefilled
// reuse those blocks' immutable segments, k-means indexes included, as forks
// share them; only the rest of the prompt is prefilled.
//
// The index is a radix tree over token ids, one per (tenant, KV layout),
// block-granular: a node is one block of `block_tokens` token ids and holds
// a template store (ClusteredKvStore::ForkPrefix) of the sinks and the
// segments of every block from the root to it. Stores of one-shot requests
// close their prompt segments at block boundaries
// (set_prompt_block_tokens), so a prompt that differs from a cached one in
// block i reuses blocks 0..i-1 and nothing beyond. Entries are never
// invalidated (segments are immutable); they leave by LRU eviction when the
// cache holds more than `max_bytes`, and an evicted node's segments live on
// only in the sessions still using them. Tenants never share a node.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/kv/clustered_store.h"

namespace ckv::server {

struct PrefixCacheStats {
  int64_t bytes = 0;      // host bytes of the cached blocks
  int64_t max_bytes = 0;  // the budget (0: off)
  int64_t blocks = 0;     // cached blocks (tree nodes)
  int64_t block_tokens = 0;
  int64_t hits = 0;           // lookups that reused >= 1 block
  int64_t misses = 0;         // lookups that reused none
  int64_t reused_tokens = 0;  // tokens not prefilled thanks to hits
  int64_t evictions = 0;      // blocks evicted for the budget
};

class PrefixCache {
 public:
  // max_bytes 0: off (every call is a no-op, lookups miss uncounted).
  PrefixCache(int64_t max_bytes, int64_t block_tokens);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool enabled() const { return max_bytes_ > 0 && block_tokens_ > 0; }
  int64_t block_tokens() const { return block_tokens_; }

  struct Match {
    std::shared_ptr<const ClusteredKvStore> store;  // null: miss
    int64_t tokens = 0;                             // whole blocks reused
  };
  // The longest run of whole blocks at the start of `tokens`, at most
  // `max_blocks`, cached for `tenant` with the layout of `kv`; the path
  // becomes the most recently used. Counts a hit or a miss.
  Match Lookup(absl::string_view tenant, const KvStoreConfig& kv,
               absl::Span<const int32_t> tokens, int64_t max_blocks);
  // Caches the first `blocks` whole blocks of `tokens`, whose KV are the
  // first `blocks` segments of `store` (a store with prompt blocks of
  // block_tokens(); checked: segments at other boundaries are not cached).
  // `store` must not be in a call. Evicts least recently used blocks to fit
  // the budget. Returns the blocks newly cached.
  int64_t Insert(absl::string_view tenant, absl::Span<const int32_t> tokens,
                 int64_t blocks, const ClusteredKvStore& store);
  // Appends (segment uid, host bytes) of every cached block of `tenant`
  // (all tenants when null), so memory totals count a segment that
  // sessions share with the cache once.
  void AppendSegments(const std::string* tenant,
                      std::vector<std::pair<int64_t, int64_t>>* out) const;
  PrefixCacheStats stats() const;

 private:
  struct Node;
  using Children =
      absl::flat_hash_map<std::vector<int32_t>, std::unique_ptr<Node>>;
  struct Root;

  static std::string LayoutKey(absl::string_view tenant,
                               const KvStoreConfig& kv);
  // Whether segment i of `store` is block i.
  bool IsBlock(const ClusteredKvStore& store, size_t i) const;
  void RefreshBytesLocked();
  void EvictLocked();

  const int64_t max_bytes_;
  const int64_t block_tokens_;
  mutable std::mutex mu_;
  // Guarded by mu_.
  absl::flat_hash_map<std::string, std::unique_ptr<Root>> roots_;
  int64_t clock_ = 0;  // LRU ticks
  PrefixCacheStats stats_;
};

}  // namespace ckv::server
