// DeviceBackend's batched attention (device_backend.h, docs/device-backend.md
// "One attention op per layer"): the unstreamed parts of a layer laid out
// in one scratch (span tables, head tables, copy_runs items, staged and
// direct rows) and attended by one op; the span table entries.
#include <algorithm>
#include <cstring>
#include <vector>

#include "model/backend/device/device_backend.h"

namespace ckv {

namespace dev = kernels::device;

void DeviceBackend::Rebase(KvPlan& plan, int64_t staged_shift,
                           int64_t direct_shift) {
  for (SpanMeta& m : plan.spans) {
    if (m.pos_off >= 0) m.pos_off += staged_shift;
    if (m.rows_off >= 0) m.rows_off += staged_shift;
    if (m.cached) continue;
    const int64_t shift = m.direct ? direct_shift : staged_shift;
    m.k_off += shift;
    m.v_off += shift;
  }
}

void DeviceBackend::LayOutBatch(int n_heads,
                                absl::Span<const AttentionPart> parts) {
  BatchLayout& l = layout_;
  l = BatchLayout{};
  int64_t rows = 0;
  for (const int i : batch_) {
    const KvPlan& plan = parts_[i].plan;
    l.entries += static_cast<int64_t>(plan.order.size());
    l.n_runs += plan.n_runs;
    rows += parts[i].n;
  }
  const int64_t tables = batch_.size() > 1 ? rows : 1;
  int64_t off = AlignUp(l.entries * int64_t{sizeof(dev::AttnSpanDesc)});
  l.heads_off = off;
  off = AlignUp(off + tables * n_heads * 2 * int64_t{sizeof(int32_t)});
  l.runs_off = off;
  off = AlignUp(off + l.n_runs * int64_t{sizeof(dev::ScatterItem)});
  std::vector<int64_t>& shifts = batch_shifts_;
  shifts.clear();
  for (const int i : batch_) {  // staged sections (aligned sizes)
    shifts.push_back(off);
    off += parts_[i].plan.staged_bytes;
  }
  l.staged_bytes = off;
  for (size_t j = 0; j < batch_.size(); ++j) {  // then the direct spans
    KvPlan& plan = parts_[batch_[j]].plan;
    Rebase(plan, shifts[j], off - plan.staged_bytes);
    off += plan.bytes - plan.staged_bytes;
  }
  l.bytes = std::max<int64_t>(off, kAlign);
}

void DeviceBackend::WriteBatchTables(
    char* dst, DevPtr kv, int n_heads, int head_dim,
    absl::Span<const AttentionPart> parts) const {
  auto* desc = reinterpret_cast<dev::AttnSpanDesc*>(dst + layout_.desc_off);
  auto* heads = reinterpret_cast<int32_t*>(dst + layout_.heads_off);
  int32_t first = 0;  // the part's first entry
  for (const int i : batch_) {
    const KvPlan& plan = parts_[i].plan;
    for (size_t e = 0; e < plan.order.size(); ++e) {
      desc[first + e] = SpanDesc(plan.spans[plan.order[e]], kv, head_dim);
    }
    // One table for a lone part; per query row in a batch of several.
    const int64_t tables = batch_.size() > 1 ? parts[i].n : 1;
    for (int64_t r = 0; r < tables; ++r) {
      for (int h = 0; h < n_heads; ++h) {
        heads[2 * h] = first + plan.heads[h].first;
        heads[2 * h + 1] = plan.heads[h].second;
      }
      heads += 2 * n_heads;
    }
    first += static_cast<int32_t>(plan.order.size());
  }
  if (!run_items_.empty()) {
    std::memcpy(dst + layout_.runs_off, run_items_.data(),
                run_items_.size() * sizeof(dev::ScatterItem));
  }
}

// The batch's attended rows into pinned staging, H2D into the device KV
// scratch (plus direct and copy_runs copies from pinned segments), and one
// attention op over the batch's query rows with the rebased span tables.
void DeviceBackend::AttendBatch(const AttentionSpec& spec,
                                absl::Span<const AttentionPart> parts,
                                Activation q, Activation out) {
  if (!batch_.empty() && ok()) RunBatch(spec, parts, q, out);
  batch_.clear();  // after an error too: the parts' attention is skipped
}

void DeviceBackend::RunBatch(const AttentionSpec& spec,
                             absl::Span<const AttentionPart> parts,
                             Activation q, Activation out) {
  LayOutBatch(spec.n_heads, parts);
  const BatchLayout& l = layout_;
  const int hd = spec.head_dim;
  char* host = ReserveStaging(l.staged_bytes);
  if (host == nullptr) return;
  for (const int i : batch_) GatherRows(parts_[i].plan, host, hd);
  // The device scratch is reused in stream order (no wait needed).
  if (kv_dev_used_ + l.bytes > kv_dev_.bytes) {
    if (!GrowDevice(kv_dev_, l.bytes)) return;
    kv_dev_used_ = 0;
  }
  const DevPtr kv = kv_dev_.ptr + kv_dev_used_;
  kv_dev_used_ += l.bytes;
  run_items_.clear();
  int64_t most = 0;
  int32_t dtype = -2;
  for (const int i : batch_) {
    if (!MakeRunItems(parts_[i].plan, kv, hd)) return;
    most = std::max(most, MaxHeadRows(parts_[i].plan));
    dtype = SharedDType(parts_[i].plan, dtype);
  }
  WriteBatchTables(host, kv, spec.n_heads, hd, parts);
  if (!Ok(rt_->CopyH2D(kv, host, l.staged_bytes, stream_))) return;
  copies_.staged_bytes += l.staged_bytes;
  for (const int i : batch_) {
    if (!CopyDirectSpans(parts_[i].plan, kv, hd)) return;
  }
  CopyRuns(kv + l.runs_off);
  const AttentionPart& front = parts[batch_.front()];
  const AttentionPart& back = parts[batch_.back()];
  const int64_t row = front.row, n = back.row + back.n - front.row;
  dev::AttentionArgs a = RowArgs(spec, row, n, q);
  a.out = Rows(out, row, n).ptr;
  a.spans = kv + l.desc_off;
  a.heads = kv + l.heads_off;
  a.n_spans = l.entries;
  a.row_heads = batch_.size() > 1;
  a.kv_dtype = std::max(dtype, -1);
  int64_t ws_bytes = 0;
  if (!SetSplits(&a, most, &ws_bytes)) return;
  // The store rows written for these parts (sinks, tail, cache misses)
  // land before the attention reads them.
  cache_rows_->Flush();
  std::vector<Range> reads = {
      Rows(q, row, n), {a.q_pos, n * int64_t{sizeof(int64_t)}}, {kv, l.bytes}};
  for (const int i : batch_) AddCachedReads(parts_[i].plan, &reads);
  std::vector<Range> writes = {Rows(out, row, n)};
  if (ws_bytes > 0) writes.push_back({a.workspace, ws_bytes});
  RunAttention("attention", a, std::move(reads), std::move(writes));
  ++copies_.attention_ops;
  copies_.batched_parts += static_cast<int64_t>(batch_.size());
}

// The most rows any query head of the current plan attends.
int64_t DeviceBackend::MaxHeadRows(const KvPlan& plan) {
  int64_t most = 0;
  for (const auto& [begin, count] : plan.heads) {
    int64_t rows = 0;
    for (int i = begin; i < begin + count; ++i) {
      rows += plan.spans[plan.order[i]].count;
    }
    most = std::max(most, rows);
  }
  return most;
}

int32_t DeviceBackend::SharedDType(const KvPlan& plan, int32_t so_far) {
  for (const SpanMeta& m : plan.spans) {
    const int32_t d = static_cast<int32_t>(m.dtype);
    if (so_far == -2) so_far = d;
    if (so_far != d) return -1;
  }
  return so_far;
}

dev::AttnSpanDesc DeviceBackend::SpanDesc(const SpanMeta& m, DevPtr kv,
                                          int head_dim) {
  dev::AttnSpanDesc d;
  if (m.cached) {
    d.k = m.cache_k.ptr.addr;
    d.v = m.cache_v.ptr.addr;
    d.bytes = std::min(m.cache_k.bytes, m.cache_v.bytes);
  } else {
    d.k = (kv + m.k_off).addr;
    d.v = (kv + m.v_off).addr;
    d.bytes = m.count * kernels::RowBytes(m.dtype, head_dim);
  }
  if (m.rows_off >= 0) d.rows = (kv + m.rows_off).addr;
  if (m.pos_off >= 0) d.positions = (kv + m.pos_off).addr;
  if (m.list_range != 0) {
    d.rows = m.list_rows;
    d.positions = m.list_positions;
    d.range_at = m.list_range;
  }
  d.first_pos = m.first_pos;
  d.count = m.count;
  d.dtype = static_cast<int32_t>(m.dtype);
  return d;
}

}  // namespace ckv
