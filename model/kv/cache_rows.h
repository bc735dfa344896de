// Where a BlockCache (model/kv/block_cache.h) keeps the K and V rows of its
// resident blocks: rows of head_dim 16-bit elements (F16/BF16), addressed by
// row index. On the CPU backend plain host memory (NewHostCacheRows); a
// device backend's rows are device memory (model/backend/device/
// device_cache_rows.h): a miss is then copied host->device once, and a hit
// is read on the device without crossing the link. The backend that runs a
// store's steps supplies the factory (StoreEnv::cache_rows).
//
// keys()/values() name the rows for the KvSpans a store hands to its
// backend's Attention. For device rows they are device addresses: only that
// backend reads them, the host never dereferences them.
#pragma once

#include <cstdint>
#include <memory>

namespace ckv {

class CacheRows {
 public:
  virtual ~CacheRows() = default;

  // Room for at least `rows` rows; rows [0, keep) keep their contents.
  virtual void Reserve(int64_t rows, int64_t keep) = 0;
  // Copies `n` consecutive stored rows of a segment (k, v: head_dim
  // elements each, host memory that stays unchanged while the segment
  // lives) to rows [at, at + n).
  virtual void Write(int64_t at, const uint16_t* k, const uint16_t* v,
                     int64_t n) = 0;
  // Moves rows [from, from + n) to [to, to + n), to < from; the ranges may
  // overlap (compaction).
  virtual void MoveDown(int64_t to, int64_t from, int64_t n) = 0;

  virtual int64_t capacity() const = 0;  // rows
  virtual const uint16_t* keys() const = 0;
  virtual const uint16_t* values() const = 0;

  // Resident segment rows (CacheRowsFactory::NewResidentRows): marks them
  // read by the backend's current step, so they are not evicted while a
  // step's spans point at them; false once the backend has evicted them to
  // make room (the owner drops them and reads its host rows again).
  virtual bool Use() { return true; }
};

// Makes the rows of each BlockCache of a store. Thread-safe.
class CacheRowsFactory {
 public:
  virtual ~CacheRowsFactory() = default;
  virtual std::unique_ptr<CacheRows> NewRows(int head_dim) = 0;
  // Rows that hold a whole segment layer (`rows` rows) while the backend's
  // budget for resident KV allows (they may be evicted later: Use()); null
  // when segments stay on the host only (the CPU backend, residency
  // offload, or no room). `asked_before`: this segment layer was refused
  // before (a refusal is counted once per segment layer).
  virtual std::unique_ptr<CacheRows> NewResidentRows(int /*head_dim*/,
                                                     int64_t /*rows*/,
                                                     bool /*asked_before*/) {
    return nullptr;
  }
};

// Host memory rows (std::vector).
std::unique_ptr<CacheRows> NewHostCacheRows(int head_dim);

}  // namespace ckv
