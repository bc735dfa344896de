// A contiguous per-layer, per-KV-head cache attended in full (sliding-window
// layers: their window): the `full` policy and the reference the clustered
// store is compared against.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "model/kv_cache.h"

namespace ckv {

struct DenseKvCacheOptions {
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  kernels::DType dtype = kernels::DType::kF16;  // kF32, kF16 or kBF16
  int64_t max_tokens = 1 << 20;                 // Reserve beyond this fails
  // Per layer (or empty): > 0 is a sliding window; Select then returns only
  // the rows the queries' windows can reach.
  std::vector<int32_t> layer_window;
};

class DenseKvCache : public KvCache {
 public:
  explicit DenseKvCache(const DenseKvCacheOptions& options);

  int64_t num_tokens() const override { return n_tokens_; }
  absl::Status Reserve(int64_t n, AppendKind kind) override;
  void Append(int layer, int64_t n, const float* k, const float* v) override;
  void Select(int layer, const LayerQuery& query, AttendSet* out) override;
  void Commit(int64_t n) override;

  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;

 private:
  // Element offset of (kv_head, token) in a layer buffer.
  int64_t Offset(int kv_head, int64_t token) const {
    return (kv_head * capacity_ + token) * opt_.head_dim;
  }
  void Grow(int64_t min_capacity);
  void StoreRows(int layer, int64_t first, int64_t n, const float* src,
                 bool is_v);

  DenseKvCacheOptions opt_;
  int elem_bytes_;
  int64_t n_tokens_ = 0;
  int64_t reserved_ = 0;            // tokens Reserve()d, not yet committed
  std::vector<int64_t> appended_;  // per layer: appended since last commit
  int64_t capacity_ = 0;
  // Per layer: [n_kv_heads][capacity][head_dim] of dtype, K and V.
  std::vector<std::vector<uint8_t>> k_, v_;
};

}  // namespace ckv
