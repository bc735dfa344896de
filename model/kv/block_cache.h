// Cluster-granular block cache of one (layer, KV head): the blocks
// (clusters or pages) selected in the last R decode steps stay resident in an
// arena of CacheRows (model/kv/cache_rows.h: device memory on a device
// backend); each step only missing blocks are copied from the host tier. On
// the CPU backend the arena is ordinary memory and copies are memcpy,
// counted exactly as host->device copies would be. The bookkeeping (which
// block is where, positions, statistics) is host memory on every backend.
#pragma once

#include <cstdint>
#include <vector>

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "model/kv/cache_rows.h"
#include "model/kv/selection.h"

namespace ckv {

struct CacheStats {
  int64_t lookups = 0;  // blocks looked up
  int64_t hits = 0;     // blocks found resident
  int64_t misses = 0;   // blocks copied from the host tier
  int64_t hit_tokens = 0;
  int64_t miss_tokens = 0;
  int64_t h2d_bytes = 0;  // = miss_tokens * bytes per token (K and V)

  void Add(const CacheStats& o);
};

class BlockCache {
 public:
  // head_dim elements per row; rows are 2-byte (F16/BF16) K and V. With
  // copy_rows false the cache only accounts (zero-copy reads); else rows go
  // to `arena` (null: host memory).
  BlockCache(int head_dim, int cache_steps, int page_size, bool copy_rows,
             std::unique_ptr<CacheRows> arena = nullptr);

  // Makes the block resident; returns its first arena row (-1 without
  // copies). Marks it used in `step`; the statistics count a block once per
  // step however often it is asked for.
  int64_t Ensure(int64_t step, const Segment& seg, int layer, int kv_head,
                 const BlockRef& block);
  // Evicts blocks not used in the last `cache_steps` steps (all when 0).
  void EndStep(int64_t step);

  // The arena's rows (device addresses on a device backend; null without
  // copies).
  const uint16_t* keys() const { return arena_ ? arena_->keys() : nullptr; }
  const uint16_t* values() const { return arena_ ? arena_->values() : nullptr; }
  // Sequence position of each arena row.
  const int64_t* positions() const { return pos_.data(); }
  const CacheStats& stats() const { return stats_; }
  int64_t resident_tokens() const { return live_rows_; }
  int64_t arena_bytes() const;  // accounted size when not copying

 private:
  struct Entry {
    int32_t table;  // tables_ index
    int32_t id;     // block id within its table
    int64_t offset;
    int32_t size;
    int64_t last_used;
  };
  // The blocks of one kind of one segment: slot[id] = entries_ index of
  // block id, or -1 when it is not resident. Block ids are dense (cluster
  // or page indices), so a lookup is two array reads.
  struct Table {
    int64_t segment_uid;
    BlockKind kind;
    std::vector<int32_t> slot;
  };

  static int64_t TableKey(int64_t segment_uid, BlockKind kind);
  // Index of the table of (uid, kind), created empty when missing.
  int32_t FindTable(int64_t segment_uid, BlockKind kind);
  // slot entry of block `id` of table t, grown to hold it.
  int32_t& Slot(int32_t t, int32_t id);
  void DropUnusedTables();
  int64_t Allocate(int32_t rows);
  void Compact();

  int head_dim_;
  int cache_steps_;
  int page_size_;
  bool copy_rows_;
  std::unique_ptr<CacheRows> arena_;  // [capacity] K and V rows, or null
  std::vector<int64_t> pos_;          // [capacity]
  std::vector<int32_t> block_rows_;   // Ensure scratch: a block's rows
  int64_t end_ = 0;                   // rows in use up to here (with holes)
  int64_t step_ = -1;                 // the step of the last Ensure
  int64_t live_rows_ = 0;
  std::vector<Table> tables_;
  absl::flat_hash_map<int64_t, int32_t> table_of_;  // TableKey -> tables_
  std::vector<Entry> entries_;                      // the resident blocks
  int32_t last_table_ = -1;                         // FindTable's last answer
  std::vector<int32_t> table_map_;                  // DropUnusedTables scratch
  CacheStats stats_;
};

}  // namespace ckv
