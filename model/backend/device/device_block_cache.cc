#include "model/backend/device/device_block_cache.h"

#include <algorithm>
#include <cstring>

#include "kernels/device/cache_phases.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

constexpr int64_t kAlign = 256;
int64_t Up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where each array lies in the table's allocation.
struct TableLayout {
  int64_t slot = 0, last_used = 0, size = 0, next_page = 0, free_stack = 0;
  int64_t counters = 0, keys = 0, values = 0, page_pos = 0, bytes = 0;
};

TableLayout LayoutOf(int32_t n_blocks, int32_t n_pages, int head_dim) {
  const int64_t rows = int64_t{n_pages} * dev::kCachePageRows;
  TableLayout t;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += Up(std::max<int64_t>(bytes, 1));
    return off;
  };
  t.slot = take(4 * int64_t{n_blocks});
  t.last_used = take(8 * int64_t{n_blocks});
  t.size = take(4 * int64_t{n_blocks});
  t.next_page = take(4 * int64_t{n_pages});
  t.free_stack = take(4 * int64_t{n_pages});
  t.counters = take(sizeof(dev::CacheCounters));
  t.keys = take(2 * rows * head_dim);
  t.values = take(2 * rows * head_dim);
  t.page_pos = take(8 * rows);
  t.bytes = at;
  return t;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t StepPagesBound(const std::vector<const Segment*>& segments, int layer,
                       int kv_head, const KvStoreConfig& config, int nq) {
  const int64_t ps = std::max(1, config.quest_page_size);
  const int64_t page_pages = CeilDiv(ps, dev::kCachePageRows);
  if (config.policy == KvPolicy::kQuest) {  // ceil(budget / ps) whole pages
    int64_t pages = 0;
    for (const Segment* s : segments) pages += CeilDiv(s->size(), ps);
    const int64_t want = CeilDiv(std::max(0, config.budget), ps);
    return int64_t{nq} * std::min(pages, want) * page_pages;
  }
  int64_t clustered = 0;
  for (const Segment* s : segments) clustered += s->size();
  const int64_t budget = std::min<int64_t>(config.budget, clustered);
  // The recent range (SelectRecent): the last segments' last rows.
  const int64_t recent = std::min<int64_t>(config.recent_tokens, budget);
  std::vector<int64_t> recent_begin(segments.size());
  int64_t left = recent, recent_blocks = 0;
  for (size_t i = segments.size(); i-- > 0;) {
    const int64_t size = segments[i]->size();
    const int64_t take = std::min(left, size);
    recent_begin[i] = size - take;
    left -= take;
    if (take > 0) recent_blocks += (size - 1) / ps - (size - take) / ps + 1;
  }
  // Each cluster's rows before the recent range, and the largest cluster.
  std::vector<int64_t> avail;
  int64_t max_size = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const HeadIndex& h = segments[i]->layer(layer).heads[kv_head];
    for (int c = 0; c < h.k; ++c) {
      const auto* first = h.members.data() + h.offsets[c];
      const auto* last = h.members.data() + h.offsets[c + 1];
      max_size = std::max<int64_t>(max_size, last - first);
      const int64_t n = std::lower_bound(first, last, recent_begin[i]) - first;
      if (n > 0) avail.push_back(n);
    }
  }
  const int64_t need = budget - recent;
  int64_t cluster_pages = 0;
  if (need > 0 && !avail.empty()) {
    std::sort(avail.begin(), avail.end());
    int64_t taken = 0, rows = 0;
    while (taken < static_cast<int64_t>(avail.size()) && rows < need) {
      rows += avail[taken++];  // the one that reaches need is taken too
    }
    cluster_pages =
        CeilDiv(need + max_size + recent, dev::kCachePageRows) + taken;
  }
  return int64_t{nq} * (cluster_pages + recent_blocks * page_pages);
}

DevicePagedCache::DevicePagedCache(dev::Runtime& runtime, dev::Stream stream,
                                   int head_dim, int cache_steps,
                                   OnMove on_move)
    : rt_(runtime),
      stream_(stream),
      head_dim_(head_dim),
      cache_steps_(cache_steps),
      on_move_(std::move(on_move)) {}

DevicePagedCache::~DevicePagedCache() {
  if (table_.ptr.null()) {  // never prepared (a checkpoint's, say)
    Release(rt_, &staging_);
    return;
  }
  (void)rt_.Synchronize(stream_);  // its ops may still read the table
  if (on_move_) on_move_(table_.ptr.addr, 0, 0);
  Release(rt_, &table_);
  Release(rt_, &staging_);
}

bool DevicePagedCache::Prepare(const std::vector<const Segment*>& segments,
                               int layer, int kv_head,
                               const KvStoreConfig& config, int nq) {
  if (!status_.ok()) return false;
  bool same = uids_.size() == segments.size();
  bool extends = uids_.size() <= segments.size();
  for (size_t i = 0; extends && i < uids_.size(); ++i) {
    extends = uids_[i] == segments[i]->uid();
  }
  same = same && extends;
  // The same segments as the last step: the same numbering and bound.
  if (same && !table_.ptr.null()) return true;
  seg_block_.assign(1, 0);
  uids_.clear();
  const int64_t ps = std::max(1, config.quest_page_size);
  for (const Segment* s : segments) {
    const int64_t blocks =
        s->layer(layer).heads[kv_head].k + CeilDiv(s->size(), ps);
    seg_block_.push_back(static_cast<int32_t>(seg_block_.back() + blocks));
    uids_.push_back(s->uid());
  }
  const int64_t pages = (int64_t{cache_steps_} + 1) *
                        StepPagesBound(segments, layer, kv_head, config, nq);
  if (extends && seg_block_.back() <= n_blocks_ && pages <= n_pages_) {
    return true;
  }
  const int64_t blocks = 2 * std::max<int64_t>(seg_block_.back(), 8);
  const int64_t want_pages = std::max<int64_t>(2 * pages, 1);
  if (blocks > INT32_MAX || want_pages > INT32_MAX / dev::kCachePageRows) {
    status_ = absl::ResourceExhaustedError("device block cache too large");
    return false;
  }
  return Make(static_cast<int32_t>(blocks), static_cast<int32_t>(want_pages));
}

bool DevicePagedCache::Make(int32_t n_blocks, int32_t n_pages) {
  const TableLayout t = LayoutOf(n_blocks, n_pages, head_dim_);
  const dev::CacheTableImage img = dev::EmptyCacheTable(n_blocks, n_pages);
  // The image: the table's arrays up to the arena (keys .. page_pos are
  // written by the fetches before anything reads them).
  auto ok = [this](const absl::Status& s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s.ok();
  };
  const uint64_t old_base = table_.ptr.addr;
  if (!ok(rt_.Synchronize(stream_)) || !ok(Grow(rt_, t.bytes, &table_)) ||
      !ok(Grow(rt_, t.keys, &staging_)) ||
      !ok(rt_.HostWrite(staging_.host, t.keys))) {
    return false;
  }
  auto put = [this](int64_t off, const void* src, int64_t bytes) {
    if (bytes > 0) std::memcpy(staging_.host + off, src, bytes);
  };
  put(t.slot, img.slot.data(), 4 * int64_t{n_blocks});
  put(t.last_used, img.last_used.data(), 8 * int64_t{n_blocks});
  put(t.size, img.size.data(), 4 * int64_t{n_blocks});
  put(t.next_page, img.next_page.data(), 4 * int64_t{n_pages});
  put(t.free_stack, img.free_stack.data(), 4 * int64_t{n_pages});
  put(t.counters, &img.counters, sizeof(img.counters));
  if (!ok(rt_.CopyH2D(table_.ptr, staging_.host, t.keys, stream_)) ||
      !ok(rt_.Synchronize(stream_))) {
    return false;
  }
  n_blocks_ = n_blocks;
  n_pages_ = n_pages;
  ++made_;
  if (on_move_) on_move_(old_base, table_.ptr.addr, table_.bytes);
  return true;
}

void DevicePagedCache::FillItem(dev::threads::CacheItem* item) const {
  const TableLayout t = LayoutOf(n_blocks_, n_pages_, head_dim_);
  const uint64_t base = table_.ptr.addr;
  item->slot = base + t.slot;
  item->last_used = base + t.last_used;
  item->size = base + t.size;
  item->next_page = base + t.next_page;
  item->free_stack = base + t.free_stack;
  item->counters = base + t.counters;
  item->keys = base + t.keys;
  item->values = base + t.values;
  item->page_pos = base + t.page_pos;
  item->n_blocks = n_blocks_;
  item->n_pages = n_pages_;
  item->head_dim = head_dim_;
  item->cache_steps = cache_steps_;
  item->bytes_per_token = 4 * head_dim_;
}

}  // namespace ckv
