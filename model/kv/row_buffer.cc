#include "model/kv/row_buffer.h"

#include <utility>

namespace ckv {

RowBuffer& RowBuffer::operator=(const RowBuffer& o) {
  k = o.k;
  v = o.v;
  capacity = o.capacity;
  synced_ = 0;
  return *this;
}

void RowBuffer::SetMirror(std::unique_ptr<CacheRows> mirror) {
  mirror_ = std::move(mirror);
  mirror_capacity_ = -1;
  synced_ = 0;
}

void RowBuffer::Sync(int n_kv, int head_dim, int64_t rows) {
  if (mirror_ == nullptr) return;
  if (mirror_capacity_ != capacity) {
    mirror_->Reserve(n_kv * capacity, 0);
    mirror_capacity_ = capacity;
    synced_ = 0;
  }
  if (rows <= synced_) {
    synced_ = rows;
    return;
  }
  for (int h = 0; h < n_kv; ++h) {
    const int64_t first = static_cast<int64_t>(h) * capacity + synced_;
    mirror_->Write(first, k.data() + first * head_dim,
                   v.data() + first * head_dim, rows - synced_);
  }
  synced_ = rows;
}

uint16_t* RowBuffer::PlaceOnMirror(int n_kv, int head_dim, int64_t row,
                                   int64_t n, uint16_t** v_row) {
  *v_row = nullptr;
  if (mirror_ == nullptr) return nullptr;
  Sync(n_kv, head_dim, row);
  synced_ = row + n;
  const int64_t at = row * head_dim;
  // The mirror's rows are device memory the backend writes; the host only
  // computes their addresses.
  *v_row = const_cast<uint16_t*>(mirror_->values()) + at;
  return const_cast<uint16_t*>(mirror_->keys()) + at;
}

const uint16_t* RowBuffer::keys(int h, int head_dim, bool mirror) const {
  if (mirror && mirror_ != nullptr) return Head(mirror_->keys(), h, head_dim);
  return Head(k.data(), h, head_dim);
}

const uint16_t* RowBuffer::values(int h, int head_dim, bool mirror) const {
  if (mirror && mirror_ != nullptr) {
    return Head(mirror_->values(), h, head_dim);
  }
  return Head(v.data(), h, head_dim);
}

}  // namespace ckv
