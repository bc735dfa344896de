#include "model/kv/cache_rows.h"

#include <cstring>
#include <vector>

namespace ckv {
namespace {

class HostCacheRows final : public CacheRows {
 public:
  explicit HostCacheRows(int head_dim) : head_dim_(head_dim) {}

  void Reserve(int64_t rows, int64_t /*keep*/) override {
    if (rows <= capacity()) return;
    k_.resize(static_cast<size_t>(rows * head_dim_));
    v_.resize(static_cast<size_t>(rows * head_dim_));
  }
  void Write(int64_t at, const uint16_t* k, const uint16_t* v,
             int64_t n) override {
    std::memcpy(&k_[at * head_dim_], k, Bytes(n));
    std::memcpy(&v_[at * head_dim_], v, Bytes(n));
  }
  void MoveDown(int64_t to, int64_t from, int64_t n) override {
    std::memmove(&k_[to * head_dim_], &k_[from * head_dim_], Bytes(n));
    std::memmove(&v_[to * head_dim_], &v_[from * head_dim_], Bytes(n));
  }
  int64_t capacity() const override {
    return static_cast<int64_t>(k_.size()) / head_dim_;
  }
  const uint16_t* keys() const override { return k_.data(); }
  const uint16_t* values() const override { return v_.data(); }

 private:
  size_t Bytes(int64_t rows) const {
    return sizeof(uint16_t) * static_cast<size_t>(rows * head_dim_);
  }

  int head_dim_;
  std::vector<uint16_t> k_, v_;  // [capacity][head_dim]
};

}  // namespace

std::unique_ptr<CacheRows> NewHostCacheRows(int head_dim) {
  return std::make_unique<HostCacheRows>(head_dim);
}

}  // namespace ckv
