// DeviceBackend's KV append on the device (docs/device-backend.md, "KV
// append on the device"): a layer's new K,V rows are rounded to the
// caches' 16-bit type and written into the caches' device rows (their sink
// and tail mirrors) by one append_rows op, which also writes the host's
// copy into pinned memory through its mapped view. The caches get those
// copies (KvCache::FillAppended) at FinishAppends, after the step's one
// wait for its logits: the rows no longer come back as F32 each layer and
// go up again before the attention.
#include <algorithm>
#include <cstring>

#include "model/backend/device/device_backend.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

constexpr int64_t kItemBytes = sizeof(dev::AppendItem);

// Appends r to *out, merged with the last range when they touch and that
// range is of the same group (out[from..]: one allocation's ranges; two
// allocations may touch).
void AddRange(std::vector<dev::Range>* out, size_t from, dev::Range r) {
  if (out->size() > from) {
    dev::Range& last = out->back();
    if (last.ptr.addr + static_cast<uint64_t>(last.bytes) == r.ptr.addr) {
      last.bytes += r.bytes;
      return;
    }
  }
  out->push_back(r);
}

uint64_t Address(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

bool DeviceBackend::AppendOnDevice(int layer, int head_dim,
                                   absl::Span<const AttentionPart> parts,
                                   Activation k, Activation v) {
  placed_parts_.assign(parts.size(), 0);
  if (debug_.host_appends || debug_.pageable_staging || !ok() ||
      parts.empty() || head_dim <= 0) {
    return false;
  }
  // One part per cache: a cache's later part must not be placed before
  // the earlier one's Select (the host path keeps that order).
  part_caches_.clear();
  int64_t tokens = 0;
  for (const AttentionPart& p : parts) {
    part_caches_.push_back(p.cache);
    tokens += p.n;
  }
  std::sort(part_caches_.begin(), part_caches_.end());
  if (std::adjacent_find(part_caches_.begin(), part_caches_.end()) !=
      part_caches_.end()) {
    return false;
  }
  const int64_t kv_dim = Width(k);
  const int64_t items_bytes = AlignUp(tokens * kItemBytes);
  const int64_t copy_bytes = AlignUp(tokens * kv_dim * 2);  // K; V the same
  const int64_t need = items_bytes + 2 * copy_bytes;
  // Earlier layers' copies go to their caches as soon as the device is
  // known to have written them (a wait came after their ops: no wait
  // here), or, waiting, when the staging would pass its cap (a long
  // prefill step waits for nothing else) or must grow.
  const int64_t cap = debug_.append_stage_cap_bytes > 0
                          ? debug_.append_stage_cap_bytes
                          : kAppendStageCap;
  if (!fills_.empty() &&
      (syncs_ != append_sync_mark_ || append_stage_used_ + need > cap ||
       append_stage_used_ + need > append_stage_.bytes)) {
    if (syncs_ == append_sync_mark_) ++copies_.append_waits;
    FillPending();
  }
  if (need > append_stage_.bytes && !GrowStaging(append_stage_, need)) {
    return false;
  }
  auto base = rt_->MappedPointer(append_stage_.host);
  if (!Ok(base.status())) return false;
  const int64_t items_off = append_stage_used_;
  int64_t k_off = items_off + items_bytes, v_off = k_off + copy_bytes;
  append_items_.clear();
  item_types_.clear();
  bool all = true;
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttentionPart& p = parts[i];
    if (!p.cache->AppendOnDevice(layer, p.n, &targets_)) {
      all = false;
      continue;
    }
    placed_parts_[i] = 1;
    fills_.push_back({p.cache, layer, p.n, k_off, v_off, kv_dim});
    for (int64_t r = 0; r < p.n; ++r) {
      const AppendTarget& t = targets_[static_cast<size_t>(r)];
      dev::AppendItem it;
      it.k_dst = Address(t.k);
      it.v_dst = Address(t.v);
      it.k_copy = (*base + k_off + r * kv_dim * 2).addr;
      it.v_copy = (*base + v_off + r * kv_dim * 2).addr;
      it.head_stride = t.head_stride * 2;
      it.src_row = p.row + r;
      append_items_.push_back(it);
      item_types_.push_back(t.dtype);
    }
    k_off += p.n * kv_dim * 2;
    v_off += p.n * kv_dim * 2;
  }
  if (append_items_.empty()) return false;
  const int64_t n = static_cast<int64_t>(append_items_.size());
  char* h = append_stage_.host + items_off;
  if (!Ok(rt_->HostWrite(h, n * kItemBytes))) return false;
  std::memcpy(h, append_items_.data(), static_cast<size_t>(n * kItemBytes));
  append_stage_used_ += need;
  // One op per run of items of one K/V type (stores of one model share it).
  for (int64_t first = 0; first < n;) {
    int64_t end = first + 1;
    while (end < n && item_types_[end] == item_types_[first]) ++end;
    LaunchAppends(k, v, item_types_[first], *base + items_off, first,
                  end - first, static_cast<int>(kv_dim / head_dim), head_dim);
    first = end;
  }
  copies_.appended_tokens += n;
  copies_.append_copy_bytes += 2 * n * kv_dim * 2;
  append_sync_mark_ = syncs_;
  return all;
}

void DeviceBackend::LaunchAppends(Activation k, Activation v,
                                  kernels::DType dtype, DevPtr items,
                                  int64_t first, int64_t n, int n_kv,
                                  int head_dim) {
  dev::AppendRowsArgs a;
  a.k = Ptr(k);
  a.v = Ptr(v);
  a.items = items + first * kItemBytes;
  a.n = n;
  a.n_kv = n_kv;
  a.head_dim = head_dim;
  a.dtype = dtype;
  const int64_t row_bytes = int64_t{n_kv} * head_dim * 2;
  std::vector<Range> reads = {{a.items, n * kItemBytes}};
  std::vector<Range> writes;
  const dev::AppendItem* run = append_items_.data() + first;
  // Each group's ranges (rows of one buffer, one head's mirror rows, one
  // copy) merged along rows.
  auto add_group = [&](std::vector<Range>* out, auto range_of) {
    const size_t from = out->size();
    for (int64_t i = 0; i < n; ++i) AddRange(out, from, range_of(run[i]));
  };
  add_group(&reads,
            [&](const dev::AppendItem& it) { return Rows(k, it.src_row, 1); });
  add_group(&reads,
            [&](const dev::AppendItem& it) { return Rows(v, it.src_row, 1); });
  for (int h = 0; h < n_kv; ++h) {
    add_group(&writes, [&](const dev::AppendItem& it) {
      return Range{DevPtr{it.k_dst} + h * it.head_stride,
                   int64_t{head_dim} * 2};
    });
    add_group(&writes, [&](const dev::AppendItem& it) {
      return Range{DevPtr{it.v_dst} + h * it.head_stride,
                   int64_t{head_dim} * 2};
    });
  }
  add_group(&writes, [&](const dev::AppendItem& it) {
    return Range{DevPtr{it.k_copy}, row_bytes};
  });
  add_group(&writes, [&](const dev::AppendItem& it) {
    return Range{DevPtr{it.v_copy}, row_bytes};
  });
  ++copies_.append_ops;
  Run(
      "append_rows", std::move(reads), std::move(writes),
      [a](dev::OpContext& c) {
        const auto* items = c.In<dev::AppendItem>(a.items, a.n);
        const int64_t width = int64_t{a.n_kv} * a.head_dim;
        const bool f16 = a.dtype == kernels::DType::kF16;
        for (int64_t i = 0; i < a.n; ++i) {
          const dev::AppendItem& it = items[i];
          for (const auto& [src, dst, copy] :
               {std::tuple{a.k, it.k_dst, it.k_copy},
                std::tuple{a.v, it.v_dst, it.v_copy}}) {
            const float* row = c.In<float>(src + it.src_row * width * 4, width);
            uint16_t* host = c.Out<uint16_t>(DevPtr{copy}, width);
            for (int h = 0; h < a.n_kv; ++h) {
              uint16_t* out =
                  c.Out<uint16_t>(DevPtr{dst} + h * it.head_stride, a.head_dim);
              for (int d = 0; d < a.head_dim; ++d) {
                const float f = row[int64_t{h} * a.head_dim + d];
                out[d] = f16 ? kernels::F32ToF16(f) : kernels::F32ToBF16(f);
                host[int64_t{h} * a.head_dim + d] = out[d];
              }
            }
          }
        }
      },
      Kernel(&dev::OpLaunchers::AppendRows, a));
}

void DeviceBackend::FillPending() {
  if (fills_.empty()) {
    append_stage_used_ = 0;
    return;
  }
  FlushDeferred();
  bool good = ok();
  if (good && syncs_ == append_sync_mark_ && !debug_.skip_append_wait) {
    good = Sync();
  }
  good = good && Ok(rt_->HostRead(append_stage_.host, append_stage_used_));
  for (const PendingFill& f : fills_) {
    if (good) {
      const auto* k =
          reinterpret_cast<const uint16_t*>(append_stage_.host + f.k_off);
      const auto* v =
          reinterpret_cast<const uint16_t*>(append_stage_.host + f.v_off);
      f.cache->FillAppended(f.layer, f.n, k, v);
      continue;
    }
    // After an error the caches still get rows (zeros), as AppendLost's.
    lost_zeros_.assign(static_cast<size_t>(f.n * f.kv_dim), 0);
    f.cache->FillAppended(f.layer, f.n, lost_zeros_.data(), lost_zeros_.data());
  }
  fills_.clear();
  append_stage_used_ = 0;
}

// The appended rows' host copies, then the plans made on the device and
// read only now (deferred calls) for the caches' bookkeeping.
void DeviceBackend::FinishAppends() {
  FillPending();
  planner_->ReadDeferred();
  Ok(planner_->status());
  std::sort(step_caches_.begin(), step_caches_.end());
  step_caches_.erase(std::unique(step_caches_.begin(), step_caches_.end()),
                     step_caches_.end());
  for (KvCache* c : step_caches_) c->FinishSelect();
  step_caches_.clear();
}

}  // namespace ckv
