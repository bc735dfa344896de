#include "model/dense_kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ckv {

using kernels::DType;

DenseKvCache::DenseKvCache(const DenseKvCacheOptions& options)
    : opt_(options),
      elem_bytes_(options.dtype == DType::kF32 ? 4 : 2),
      appended_(options.n_layers, 0),
      k_(options.n_layers),
      v_(options.n_layers) {}

int64_t DenseKvCache::bytes() const {
  int64_t n = 0;
  for (size_t l = 0; l < k_.size(); ++l) n += k_[l].size() + v_[l].size();
  return n;
}

absl::Status DenseKvCache::Reserve(int64_t n, AppendKind /*kind*/) {
  if (n < 0 || n_tokens_ + n > opt_.max_tokens) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache holds at most ", opt_.max_tokens, " tokens; ", n_tokens_,
        " stored, ", n, " more requested"));
  }
  if (n_tokens_ + n > capacity_) {
    Grow(std::min(opt_.max_tokens,
                  std::max(n_tokens_ + n, capacity_ * 2 + 256)));
  }
  reserved_ = n;
  std::fill(appended_.begin(), appended_.end(), 0);
  return absl::OkStatus();
}

void DenseKvCache::Grow(int64_t min_capacity) {
  const int64_t old_cap = capacity_;
  const int64_t row = int64_t{opt_.head_dim} * elem_bytes_;
  capacity_ = min_capacity;
  for (int l = 0; l < opt_.n_layers; ++l) {
    for (auto* buf : {&k_[l], &v_[l]}) {
      std::vector<uint8_t> grown(opt_.n_kv_heads * capacity_ * row);
      for (int h = 0; h < opt_.n_kv_heads && old_cap > 0; ++h) {
        std::memcpy(grown.data() + h * capacity_ * row,
                    buf->data() + h * old_cap * row, n_tokens_ * row);
      }
      buf->swap(grown);
    }
  }
}

void DenseKvCache::StoreRows(int layer, int64_t first, int64_t n,
                             const float* src, bool is_v) {
  uint8_t* base = (is_v ? v_ : k_)[layer].data();
  const int hd = opt_.head_dim;
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < opt_.n_kv_heads; ++h) {
      const float* row = src + (t * opt_.n_kv_heads + h) * hd;
      uint8_t* dst = base + Offset(h, first + t) * elem_bytes_;
      if (opt_.dtype == DType::kF32) {
        std::memcpy(dst, row, hd * sizeof(float));
        continue;
      }
      auto* d16 = reinterpret_cast<uint16_t*>(dst);
      for (int i = 0; i < hd; ++i) {
        d16[i] = opt_.dtype == DType::kF16 ? kernels::F32ToF16(row[i])
                                           : kernels::F32ToBF16(row[i]);
      }
    }
  }
}

void DenseKvCache::Append(int layer, int64_t n, const float* k,
                          const float* v) {
  const int64_t first = n_tokens_ + appended_[layer];
  if (appended_[layer] + n > reserved_) return;  // contract violation
  StoreRows(layer, first, n, k, /*is_v=*/false);
  StoreRows(layer, first, n, v, /*is_v=*/true);
  appended_[layer] += n;
}

void DenseKvCache::Select(int layer, const LayerQuery& query, AttendSet* out) {
  out->Clear();
  const int64_t window = layer < static_cast<int>(opt_.layer_window.size())
                             ? opt_.layer_window[layer]
                             : 0;
  const int64_t min_pos = window > 0 && query.n_q > 0
                              ? WindowStart(query.q_pos, query.n_q, window)
                              : 0;
  const int group = opt_.n_heads / opt_.n_kv_heads;
  for (int h = 0; h < opt_.n_kv_heads; ++h) {
    kernels::KvSpan s;
    s.k = k_[layer].data() + Offset(h, 0) * elem_bytes_;
    s.v = v_[layer].data() + Offset(h, 0) * elem_bytes_;
    s.dtype = opt_.dtype;
    s.stride = opt_.head_dim;
    s.count = n_tokens_ + appended_[layer];
    s.first_pos = 0;
    out->spans.push_back(SpanFrom(s, min_pos));
  }
  out->per_head.resize(opt_.n_heads);
  for (int h = 0; h < opt_.n_heads; ++h) {
    out->per_head[h] = {&out->spans[h / group], 1};
  }
}

void DenseKvCache::Commit(int64_t n) {
  n_tokens_ += n;
  reserved_ -= n;
  for (auto& a : appended_) a -= n;
}

}  // namespace ckv
