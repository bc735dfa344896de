#include "server/prefix_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ckv::server {

struct PrefixCache::Node {
  std::vector<int32_t> block;  // its key in `owner`
  Children* owner = nullptr;   // the parent's (or the root's) children
  std::shared_ptr<const ClusteredKvStore> store;  // sinks + path's segments
  int64_t uid = 0;                                // the block's segment
  int64_t bytes = 0;                              // counted in stats_.bytes
  bool indexed = false;                           // index bytes counted (built)
  int64_t last_used = 0;
  Children children;
};

struct PrefixCache::Root {
  std::string tenant;
  Children children;
};

PrefixCache::PrefixCache(int64_t max_bytes, int64_t block_tokens)
    : max_bytes_(std::max<int64_t>(0, max_bytes)),
      block_tokens_(std::max<int64_t>(0, block_tokens)) {
  stats_.max_bytes = max_bytes_;
  stats_.block_tokens = block_tokens_;
}

PrefixCache::~PrefixCache() = default;

// Tenant, then every setting that shapes the segments or decides which
// indexes they carry: only stores of one layout share blocks.
std::string PrefixCache::LayoutKey(absl::string_view tenant,
                                   const KvStoreConfig& kv) {
  return absl::StrCat(
      tenant, "\x1f", static_cast<int>(kv.policy), ",", kv.sink_tokens, ",",
      kv.tokens_per_cluster, ",", kv.window, ",", kv.dense_layers, ",",
      kv.kmeans_max_iters, ",", kv.quest_page_size, ",", kv.seed, ",",
      static_cast<int>(kv.metric), ",", static_cast<int>(kv.kv_dtype), ",",
      kv.build_all_indexes ? 1 : 0);
}

bool PrefixCache::IsBlock(const ClusteredKvStore& store, size_t i) const {
  const auto& segs = store.segments();
  const int64_t sinks = store.config().sink_tokens;
  if (i >= segs.size() || sinks >= block_tokens_) return false;
  const int64_t first =
      i == 0 ? sinks : static_cast<int64_t>(i) * block_tokens_;
  const int64_t end = (static_cast<int64_t>(i) + 1) * block_tokens_;
  return segs[i]->first_pos() == first &&
         segs[i]->first_pos() + segs[i]->size() == end;
}

PrefixCache::Match PrefixCache::Lookup(absl::string_view tenant,
                                       const KvStoreConfig& kv,
                                       absl::Span<const int32_t> tokens,
                                       int64_t max_blocks) {
  Match m;
  if (!enabled()) return m;
  std::lock_guard<std::mutex> lock(mu_);
  auto root = roots_.find(LayoutKey(tenant, kv));
  Children* level = root == roots_.end() ? nullptr : &root->second->children;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<Node*> path;
  for (int64_t b = 0;
       level != nullptr && b < max_blocks && (b + 1) * block_tokens_ <= n;
       ++b) {
    std::vector<int32_t> key(tokens.begin() + b * block_tokens_,
                             tokens.begin() + (b + 1) * block_tokens_);
    auto it = level->find(key);
    if (it == level->end()) break;
    path.push_back(it->second.get());
    level = &it->second->children;
  }
  const int64_t now = ++clock_;
  for (Node* node : path) node->last_used = now;
  if (path.empty()) {
    ++stats_.misses;
    return m;
  }
  m.store = path.back()->store;
  m.tokens = static_cast<int64_t>(path.size()) * block_tokens_;
  ++stats_.hits;
  stats_.reused_tokens += m.tokens;
  return m;
}

int64_t PrefixCache::Insert(absl::string_view tenant,
                            absl::Span<const int32_t> tokens, int64_t blocks,
                            const ClusteredKvStore& store) {
  if (!enabled()) return 0;
  blocks = std::min<int64_t>(
      blocks, static_cast<int64_t>(tokens.size()) / block_tokens_);
  const KvShape& shape = store.shape();
  const int64_t sink_bytes = int64_t{2} * 2 * shape.head_dim *
                             shape.n_kv_heads * shape.n_layers *
                             store.config().sink_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Root>& root = roots_[LayoutKey(tenant, store.config())];
  if (root == nullptr) {
    root = std::make_unique<Root>();
    root->tenant = std::string(tenant);
  }
  const int64_t now = ++clock_;
  Children* level = &root->children;
  int64_t added = 0;
  for (int64_t b = 0; b < blocks && IsBlock(store, b); ++b) {
    std::vector<int32_t> key(tokens.begin() + b * block_tokens_,
                             tokens.begin() + (b + 1) * block_tokens_);
    std::unique_ptr<Node>& node = (*level)[key];
    if (node == nullptr) {
      auto prefix = store.ForkPrefix(static_cast<size_t>(b) + 1);
      if (!prefix.ok()) {
        level->erase(key);
        break;
      }
      node = std::make_unique<Node>();
      node->block = std::move(key);
      node->owner = level;
      node->store = *std::move(prefix);
      node->uid = store.segments()[b]->uid();
      node->bytes = store.segments()[b]->kv_bytes() + sink_bytes;
      stats_.bytes += node->bytes;
      ++stats_.blocks;
      ++added;
    }
    node->last_used = now;
    level = &node->children;
  }
  RefreshBytesLocked();
  EvictLocked();
  return added;
}

namespace {
template <typename Children, typename Fn>
void ForEachNode(Children& children, const Fn& fn) {
  for (auto& [key, node] : children) {
    fn(*node);
    ForEachNode(node->children, fn);
  }
}
}  // namespace

// Index bytes join a block's count once its index is built (the
// ClusterWorker writes them until then).
void PrefixCache::RefreshBytesLocked() {
  for (auto& [key, root] : roots_) {
    ForEachNode(root->children, [this](Node& node) {
      if (node.indexed || !node.store->IndexReady()) return;
      node.indexed = true;
      const auto& segs = node.store->segments();
      const int64_t index = segs.back()->index_bytes();
      node.bytes += index;
      stats_.bytes += index;
    });
  }
}

// Least recently used leaves first: a block's ancestors are used whenever
// it is, and its segment is in its descendants' stores, so only a leaf's
// eviction frees memory.
void PrefixCache::EvictLocked() {
  while (stats_.bytes > max_bytes_) {
    Node* victim = nullptr;
    for (auto& [key, root] : roots_) {
      ForEachNode(root->children, [&victim](Node& node) {
        if (!node.children.empty()) return;
        if (victim == nullptr || node.last_used < victim->last_used) {
          victim = &node;
        }
      });
    }
    if (victim == nullptr) break;
    stats_.bytes -= victim->bytes;
    --stats_.blocks;
    ++stats_.evictions;
    const std::vector<int32_t> key = victim->block;
    victim->owner->erase(key);  // destroys the node
  }
  absl::erase_if(
      roots_, [](const auto& root) { return root.second->children.empty(); });
}

void PrefixCache::AppendSegments(
    const std::string* tenant,
    std::vector<std::pair<int64_t, int64_t>>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, root] : roots_) {
    if (tenant != nullptr && root->tenant != *tenant) continue;
    ForEachNode(root->children, [out](const Node& node) {
      out->emplace_back(node.uid, node.bytes);
    });
  }
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace ckv::server
