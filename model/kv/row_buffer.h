// Rows a clustered store appends to — its sinks and its open tail — in one
// layer: host memory [n_kv][capacity][head_dim] of 16-bit elements (the
// authoritative copy) and, when the backend gives one, a mirror in its
// cache rows (StoreEnv::cache_rows: device memory on a device backend).
// Host writes mark the rows they change (Touch); Sync brings the mirror up
// to date before the rows are attended, so only rows changed since the
// last Sync cross the link — on the decode path, the step's new row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv/cache_rows.h"

namespace ckv {

class RowBuffer {
 public:
  RowBuffer() = default;
  // Copies the host rows only: a copy keeps (or has no) mirror of its own,
  // to be filled by its next Sync.
  RowBuffer(const RowBuffer& o) : k(o.k), v(o.v), capacity(o.capacity) {}
  RowBuffer& operator=(const RowBuffer& o);
  RowBuffer(RowBuffer&&) noexcept = default;
  RowBuffer& operator=(RowBuffer&&) noexcept = default;

  // Rows of every head from `row` on changed (or will) on the host.
  void Touch(int64_t row) { synced_ = std::min(synced_, row); }
  void SetMirror(std::unique_ptr<CacheRows> mirror);
  bool mirrored() const { return mirror_ != nullptr; }
  // Makes the mirror's rows [0, rows) of every head equal the host's
  // (n_kv heads of head_dim). A capacity change re-lays the mirror out.
  void Sync(int n_kv, int head_dim, int64_t rows);
  // Rows [row, row + n) of every head are written on the device by the
  // backend (KvCache::AppendOnDevice): brings the mirror's rows [0, row) up
  // to date (as Sync) and counts the n rows as equal to the host's, which
  // the caller fills with the device's bits without Touch. Returns head 0's
  // mirror row `row` (a device address); null without a mirror.
  uint16_t* PlaceOnMirror(int n_kv, int head_dim, int64_t row, int64_t n,
                          uint16_t** v_row);
  // Head h's first row: in the mirror (a device address on a device
  // backend) when `mirror` and there is one, else on the host.
  const uint16_t* keys(int h, int head_dim, bool mirror) const;
  const uint16_t* values(int h, int head_dim, bool mirror) const;

  std::vector<uint16_t> k, v;  // host rows; writers Touch what they change
  int64_t capacity = 0;        // rows per head

 private:
  const uint16_t* Head(const uint16_t* base, int h, int head_dim) const {
    return base + static_cast<int64_t>(h) * capacity * head_dim;
  }

  std::unique_ptr<CacheRows> mirror_;
  int64_t mirror_capacity_ = -1;  // the capacity its layout was made for
  int64_t synced_ = 0;            // rows [0, synced_) equal the host's
};

}  // namespace ckv
