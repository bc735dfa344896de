#include "model/kv/block_cache.h"

#include <algorithm>
#include <cstring>

namespace ckv {

void CacheStats::Add(const CacheStats& o) {
  lookups += o.lookups;
  hits += o.hits;
  misses += o.misses;
  hit_tokens += o.hit_tokens;
  miss_tokens += o.miss_tokens;
  h2d_bytes += o.h2d_bytes;
}

BlockCache::BlockCache(int head_dim, int cache_steps, int page_size,
                       bool copy_rows, std::unique_ptr<CacheRows> arena)
    : head_dim_(head_dim),
      cache_steps_(cache_steps),
      page_size_(page_size),
      copy_rows_(copy_rows),
      arena_(std::move(arena)) {
  if (copy_rows_ && arena_ == nullptr) arena_ = NewHostCacheRows(head_dim);
  if (!copy_rows_) arena_.reset();
}

// Without copies: what an arena would hold for the resident blocks.
int64_t BlockCache::arena_bytes() const {
  if (!copy_rows_) return live_rows_ * int64_t{2} * 2 * head_dim_;
  return arena_->capacity() * int64_t{2} * 2 * head_dim_ +
         static_cast<int64_t>(pos_.size()) * sizeof(int64_t);
}

int64_t BlockCache::Allocate(int32_t rows) {
  const int64_t capacity = static_cast<int64_t>(pos_.size());
  if (end_ + rows > capacity) {
    const int64_t grown = std::max(end_ + rows, capacity * 2);
    arena_->Reserve(grown, end_);
    pos_.resize(grown);
  }
  const int64_t offset = end_;
  end_ += rows;
  live_rows_ += rows;
  return offset;
}

// Moves live blocks to the front, keeping their order (device-to-device
// moves: not host->device traffic).
void BlockCache::Compact() {
  std::vector<Entry*> live;
  for (Entry& e : entries_) live.push_back(&e);
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) {
    return a->offset < b->offset;
  });
  int64_t next = 0;
  for (Entry* e : live) {
    if (e->offset != next) {
      arena_->MoveDown(next, e->offset, e->size);
      std::memmove(&pos_[next], &pos_[e->offset], sizeof(int64_t) * e->size);
      e->offset = next;
    }
    next += e->size;
  }
  end_ = next;
}

int64_t BlockCache::TableKey(int64_t segment_uid, BlockKind kind) {
  return segment_uid * 2 + (kind == BlockKind::kPage ? 1 : 0);
}

int32_t BlockCache::FindTable(int64_t segment_uid, BlockKind kind) {
  if (last_table_ >= 0 && tables_[last_table_].segment_uid == segment_uid &&
      tables_[last_table_].kind == kind) {
    return last_table_;
  }
  const auto [it, added] = table_of_.try_emplace(
      TableKey(segment_uid, kind), static_cast<int32_t>(tables_.size()));
  if (added) tables_.push_back({segment_uid, kind, {}});
  return last_table_ = it->second;
}

int32_t& BlockCache::Slot(int32_t t, int32_t id) {
  std::vector<int32_t>& slot = tables_[t].slot;
  if (id >= static_cast<int32_t>(slot.size())) slot.resize(id + 1, -1);
  return slot[id];
}

int64_t BlockCache::Ensure(int64_t step, const Segment& seg, int layer,
                           int kv_head, const BlockRef& block) {
  if (step != step_) {
    // A new step: no offset of it has been handed out yet, so this is the
    // only time live blocks may move (the step's offsets must hold until
    // its attention has read the arena).
    step_ = step;
    if (copy_rows_ && end_ > 2 * live_rows_) Compact();
  }
  const int32_t table = FindTable(seg.uid(), block.kind);
  int32_t& slot = Slot(table, block.id);
  if (slot >= 0) {
    Entry& e = entries_[slot];
    if (e.last_used == step) return e.offset;  // already looked up this step
    ++stats_.lookups;
    ++stats_.hits;
    stats_.hit_tokens += e.size;
    e.last_used = step;
    return e.offset;
  }
  ++stats_.lookups;
  const int32_t size =
      BlockSize(seg, layer, kv_head, block.kind, block.id, page_size_);
  const int64_t row_bytes = int64_t{2} * head_dim_;
  ++stats_.misses;
  stats_.miss_tokens += size;
  stats_.h2d_bytes += 2 * row_bytes * size;
  if (!copy_rows_) {
    live_rows_ += size;
    slot = static_cast<int32_t>(entries_.size());
    entries_.push_back({table, block.id, -1, size, step});
    return -1;
  }
  const int64_t offset = Allocate(size);
  const uint16_t* k = seg.keys(layer, kv_head);
  const uint16_t* v = seg.values(layer, kv_head);
  block_rows_.clear();
  AppendBlockRows(seg, layer, kv_head, block.kind, block.id, 0, size,
                  page_size_, &block_rows_);
  const std::vector<int32_t>& rows = block_rows_;
  // One copy per run of consecutive stored rows (a whole cluster when the
  // segment stores its rows by cluster).
  for (int32_t r = 0; r < size;) {
    int32_t run = 1;
    while (r + run < size && rows[r + run] == rows[r] + run) ++run;
    const int64_t src = int64_t{rows[r]} * head_dim_;
    arena_->Write(offset + r, k + src, v + src, run);
    for (int32_t i = r; i < r + run; ++i) {
      pos_[offset + i] =
          seg.first_pos() + seg.SegmentRow(layer, kv_head, rows[i]);
    }
    r += run;
  }
  slot = static_cast<int32_t>(entries_.size());
  entries_.push_back({table, block.id, offset, size, step});
  return offset;
}

void BlockCache::EndStep(int64_t step) {
  const size_t before = entries_.size();
  size_t kept = 0;
  for (size_t i = 0; i < before; ++i) {
    const Entry& e = entries_[i];
    if (step - e.last_used >= cache_steps_) {
      live_rows_ -= e.size;
      tables_[e.table].slot[e.id] = -1;
      continue;
    }
    tables_[e.table].slot[e.id] = static_cast<int32_t>(kept);
    entries_[kept++] = e;
  }
  entries_.resize(kept);
  if (entries_.empty()) end_ = 0;
  // A table loses its last block only by an eviction.
  if (kept < before) DropUnusedTables();
}

// A table without resident blocks goes (its segment may be gone for good);
// the tables keep their order, so entries only renumber theirs.
void BlockCache::DropUnusedTables() {
  table_map_.assign(tables_.size(), -1);
  for (const Entry& e : entries_) table_map_[e.table] = 0;
  int32_t kept = 0;
  for (size_t t = 0; t < tables_.size(); ++t) {
    if (table_map_[t] < 0) continue;
    table_map_[t] = kept;
    if (static_cast<int32_t>(t) != kept) tables_[kept] = std::move(tables_[t]);
    ++kept;
  }
  if (kept == static_cast<int32_t>(tables_.size())) return;
  tables_.resize(kept);
  for (Entry& e : entries_) e.table = table_map_[e.table];
  table_of_.clear();
  for (int32_t t = 0; t < kept; ++t) {
    table_of_[TableKey(tables_[t].segment_uid, tables_[t].kind)] = t;
  }
  last_table_ = -1;
}

}  // namespace ckv
