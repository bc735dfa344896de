// DeviceBackend's attention (device_backend.h): q/k/v rows to the host,
// the host KvCache appends and selects, the attended rows reach the device
// (staged, copied from pinned segments, or read in place from store rows
// in device memory) and one attention op per part attends them; a part
// whose rows to copy exceed the stream chunk is streamed instead
// (device_streamed_attention.cc).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "model/backend/device/device_backend.h"
#include "model/backend/kernel_args.h"

namespace ckv {

namespace cpu = kernels::cpu;
namespace dev = kernels::device;

namespace {

using Clock = std::chrono::steady_clock;

// A span's identity for deduplication: every field the attention kernel
// compares (two heads attend together when their lists are field-equal).
using SpanKey =
    std::tuple<const void*, const void*, int, int64_t, int64_t, int64_t,
               const void*, const void*, const void*, const void*>;

SpanKey KeyOf(const kernels::KvSpan& s) {
  return {s.k,           s.v,     static_cast<int>(s.dtype),
          s.stride,      s.count, s.first_pos,
          s.positions,   s.rows,  s.row_positions,
          s.device_range};
}

bool PlainRun(const kernels::KvSpan& s) {
  return s.positions == nullptr && s.rows == nullptr &&
         s.row_positions == nullptr;
}

// The attention op's host form: its span and head tables read through the
// op's declared ranges, each span's rows mapped the same way, then the CPU
// attention (what a device kernel computes from the same tables); a chunk
// of streamed attention folds them into the state with the reference.
void AttendFromTables(const dev::AttentionArgs& a, dev::OpContext& c) {
  const auto* desc = c.In<dev::AttnSpanDesc>(a.spans, a.n_spans);
  const int64_t tables = a.row_heads ? a.n_q : 1;
  const int32_t* heads =
      c.In<int32_t>(a.heads, 2 * int64_t{a.n_heads} * tables);
  std::vector<kernels::KvSpan> spans(static_cast<size_t>(a.n_spans));
  for (int64_t i = 0; i < a.n_spans; ++i) {
    const dev::AttnSpanDesc& d = desc[i];
    kernels::KvSpan& s = spans[static_cast<size_t>(i)];
    s.k = c.In<char>(dev::DevPtr{d.k}, d.bytes);
    s.v = c.In<char>(dev::DevPtr{d.v}, d.bytes);
    s.dtype = static_cast<kernels::DType>(d.dtype);
    s.stride = a.head_dim;
    s.first_pos = d.first_pos;
    // A span over row lists written on the device reads its entries there.
    int64_t first = 0, last = 0;
    dev::SpanRange(
        d,
        d.range_at != 0 ? c.In<int64_t>(dev::DevPtr{d.range_at}, 2) : nullptr,
        &first, &last);
    s.count = last - first;
    if (d.rows != 0) {
      s.rows = c.In<int32_t>(dev::DevPtr{d.rows}, d.count) + first;
    }
    if (d.positions != 0) {
      s.positions = c.In<int64_t>(dev::DevPtr{d.positions}, d.count) + first;
    }
  }
  const int64_t row_elems = int64_t{a.n_heads} * a.head_dim;
  const int64_t state_row = int64_t{a.n_heads} * (int64_t{a.head_dim} + 2);
  const float* q = c.In<float>(a.q, a.n_q * row_elems);
  const int64_t* q_pos = c.In<int64_t>(a.q_pos, a.n_q);
  float* state =
      a.state.null() ? nullptr : c.Out<float>(a.state, a.n_q * state_row);
  float* out =
      a.state.null() ? c.Out<float>(a.out, a.n_q * row_elems) : nullptr;
  std::vector<kernels::KvSpanList> lists(static_cast<size_t>(a.n_heads));
  const int64_t table_ints = 2 * int64_t{a.n_heads};
  // Consecutive query rows with the same head tables (one part of a batch)
  // attend together, as the part would alone.
  for (int64_t r0 = 0; r0 < a.n_q;) {
    const int32_t* t = heads + (a.row_heads ? r0 * table_ints : 0);
    int64_t r1 = a.row_heads ? r0 + 1 : a.n_q;
    while (r1 < a.n_q &&
           std::equal(t, t + table_ints, t + (r1 - r0) * table_ints)) {
      ++r1;
    }
    for (int h = 0; h < a.n_heads; ++h) {
      lists[h] = {spans.data() + t[2 * h], t[2 * h + 1]};
    }
    cpu::AttentionArgs args;
    args.q = q + r0 * row_elems;
    args.q_pos = q_pos + r0;
    args.n_q = static_cast<int>(r1 - r0);
    args.n_heads = a.n_heads;
    args.head_dim = a.head_dim;
    args.scale = a.scale;
    args.softcap = a.softcap;
    args.window = a.window;
    args.kv = lists.data();
    if (state != nullptr) {
      kernels::ref::AttentionAccumulate(args, state + r0 * state_row, a.fresh);
    } else {
      args.out = out + r0 * row_elems;
      cpu::Attention(nullptr, args);
    }
    r0 = r1;
  }
}

}  // namespace

// ---- Attention (stage 1: selection on the host) -----------------------------

void DeviceBackend::Attention(int layer, const AttentionSpec& spec,
                              absl::Span<const AttentionPart> parts,
                              Activation q, Activation k, Activation v,
                              Activation out, ForwardProfile* profile) {
  FlushDeferred();  // attention is never inside a region; be safe
  const int64_t q_dim = Width(q), kv_dim = Width(k);
  // Parts whose caches keep device rows get their K,V rows written there
  // now (placed_parts_); only the others need k and v on the host, and q
  // only when a part's selection reads it (a sparse decode layer, or one
  // being recorded): else the layer does not wait for the device.
  const bool all_placed = AppendOnDevice(layer, spec.head_dim, parts, k, v);
  for (const AttentionPart& p : parts) step_caches_.push_back(p.cache);
  // The plans are launched first: a part whose plan got row lists on the
  // device reads no queries on the host (asked after the launch).
  if (!LaunchSelects(layer, parts, q, k, !all_placed)) {
    planner_->FinishQueued();
    AppendLost(layer, parts, kv_dim);
    return;
  }
  bool host_q = !all_placed;
  for (const AttentionPart& p : parts) {
    host_q = host_q || p.cache->SelectReadsQueries(layer, p.n);
  }
  const float *hq = nullptr, *hk = nullptr, *hv = nullptr;
  if (!host_q) {
    planner_->DeferQueued();  // the plans are read at the step's end
  } else if (!FetchQueries(q, k, v, !all_placed, &hq, &hk, &hv)) {
    AppendLost(layer, parts, kv_dim);
    return;
  }
  const Clock::time_point t0 = profile ? Clock::now() : Clock::time_point{};
  if (parts_.size() < parts.size()) parts_.resize(parts.size());
  batch_.clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttentionPart& p = parts[i];
    PartPlan& pp = parts_[i];
    if (!placed_parts_[i]) {
      p.cache->Append(layer, p.n, hk + p.row * kv_dim, hv + p.row * kv_dim);
    }
    LayerQuery query{hq != nullptr ? hq + p.row * q_dim : nullptr, &pos_[p.row],
                     static_cast<int>(p.n)};
    const Clock::time_point t1 = profile ? Clock::now() : Clock::time_point{};
    p.cache->Select(layer, query, &pp.attend);
    if (profile) profile->select_ns += NanosSince(t1);
    // A device error of the planner or the k-means builder (the store then
    // planned or clustered on the host) is the backend's: sticky, as every
    // other (the parts' attention is then skipped).
    Ok(planner_->status());
    Ok(index_builder_->status());
    Ok(cache_rows_->status());
    if (!ok()) continue;  // the caches still get their rows
    PlanSpans(pp.attend, spec.n_heads, spec.head_dim, &pp.plan);
    const bool streams = StreamsPlan(pp.plan, spec.head_dim);
    // A batch is a run of consecutive query rows (one op over them).
    if (!batch_.empty() &&
        (streams || debug_.one_op_per_part ||
         parts[batch_.back()].row + parts[batch_.back()].n != p.row)) {
      AttendBatch(spec, parts, q, out);
    }
    if (streams) {
      AttendStreamed(spec, p, pp.plan, q, out);
    } else {
      batch_.push_back(static_cast<int>(i));
    }
  }
  AttendBatch(spec, parts, q, out);
  if (profile) profile->attention_ns += NanosSince(t0);
}

// Every part's sparse decode plan in one planner batch: it gathers the
// queries from the q rows on the device once queries_ready fires (the
// host rows named are where a copy of q would land: SetQueryRows), and
// with row lists the attention waits for them on the device.
bool DeviceBackend::LaunchSelects(int layer,
                                  absl::Span<const AttentionPart> parts,
                                  Activation q, Activation k, bool with_kv) {
  // Only one-token (decode) parts select sparsely: a prefill step queues
  // nothing (and its q/k/v staging is not grown for it).
  bool decodes = false;
  for (const AttentionPart& p : parts) decodes = decodes || p.n == 1;
  if (!decodes) return ok();
  const int64_t qb = Rows(q).bytes, kb = with_kv ? Rows(k).bytes : 0;
  if (!GrowStaging(qkv_stage_, qb + 2 * kb) ||
      !Ok(rt_->Record(queries_ready_, stream_))) {
    return false;
  }
  const auto* hq = reinterpret_cast<const float*>(qkv_stage_.host);
  const int64_t q_dim = Width(q);
  planner_->SetQueryRows(hq, Ptr(q).addr, qb);
  for (const AttentionPart& p : parts) {
    p.cache->PrepareSelect(
        layer, {hq + p.row * q_dim, &pos_[p.row], static_cast<int>(p.n)});
  }
  planner_->LaunchQueued(queries_ready_);
  planner_->ClearQueryRows();
  if (planner_->lists_launched() && !debug_.skip_lists_wait) {
    return Ok(rt_->Wait(stream_, planner_->lists_ready()));
  }
  return ok();
}

// q (and k, v when with_kv) to the host while the launched plans run; then
// one wait for each.
bool DeviceBackend::FetchQueries(Activation q, Activation k, Activation v,
                                 bool with_kv, const float** hq,
                                 const float** hk, const float** hv) {
  if (!EnqueueQkv(q, k, v, with_kv, hq, hk, hv)) {
    planner_->FinishQueued();
    return false;
  }
  const bool fetched = AwaitQkv();
  planner_->FinishQueued();
  // The wait in AwaitQkv finished every earlier copy out of the KV
  // staging: it is reused from its start.
  if (fetched) kv_stage_used_ = 0;
  return fetched;
}

bool DeviceBackend::EnqueueQkv(Activation q, Activation k, Activation v,
                               bool with_kv, const float** hq, const float** hk,
                               const float** hv) {
  const int64_t qb = Rows(q).bytes, kb = with_kv ? Rows(k).bytes : 0;
  if (!GrowStaging(qkv_stage_, qb + 2 * kb)) return false;
  char* h = qkv_stage_.host;
  if (!Ok(rt_->CopyD2H(h, Ptr(q), qb, stream_)) ||
      (with_kv && (!Ok(rt_->CopyD2H(h + qb, Ptr(k), kb, stream_)) ||
                   !Ok(rt_->CopyD2H(h + qb + kb, Ptr(v), kb, stream_))))) {
    return false;
  }
  qkv_bytes_ = qb + 2 * kb;
  copies_.qkv_bytes += qkv_bytes_;
  *hq = reinterpret_cast<const float*>(h);
  *hk = with_kv ? reinterpret_cast<const float*>(h + qb) : nullptr;
  *hv = with_kv ? reinterpret_cast<const float*>(h + qb + kb) : nullptr;
  return true;
}

bool DeviceBackend::AwaitQkv() {
  if (!ok()) return false;
  if (!debug_.skip_sync_before_host_read && !Sync()) return false;
  return Ok(rt_->HostRead(qkv_stage_.host, qkv_bytes_));
}

// After an error the caches still get their rows (zeros), so that their
// bookkeeping stays consistent with the Commit that follows.
void DeviceBackend::AppendLost(int layer, absl::Span<const AttentionPart> parts,
                               int64_t kv_dim) {
  lost_.assign(static_cast<size_t>(rows_ * kv_dim), 0.0f);
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttentionPart& p = parts[i];
    if (i < placed_parts_.size() && placed_parts_[i]) continue;  // placed
    p.cache->Append(layer, p.n, lost_.data() + p.row * kv_dim,
                    lost_.data() + p.row * kv_dim);
  }
}

// The unique spans of `attend` (by content) with their places in the
// part's scratch: staged K rows, V rows, then explicit positions and row
// lists, each section aligned; then the direct spans' K and V.
void DeviceBackend::PlanSpans(const AttendSet& attend, int n_heads,
                              int head_dim, KvPlan* plan_ptr) {
  KvPlan& plan = *plan_ptr;
  plan.spans.clear();
  plan.sources.clear();
  plan.order.clear();
  plan.heads.clear();
  absl::flat_hash_map<SpanKey, int> index;
  for (int h = 0; h < n_heads; ++h) {
    const kernels::KvSpanList& list = attend.per_head[h];
    plan.heads.push_back({static_cast<int>(plan.order.size()), list.count});
    for (int i = 0; i < list.count; ++i) {
      const kernels::KvSpan& s = list.spans[i];
      auto [it, fresh] =
          index.try_emplace(KeyOf(s), static_cast<int>(plan.spans.size()));
      if (fresh) {
        plan.spans.push_back(SpanMeta{s.dtype, s.count, s.first_pos});
        plan.sources.push_back(&s);
      }
      plan.order.push_back(it->second);
    }
  }
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    SpanMeta& m = plan.spans[i];
    const kernels::KvSpan& s = *plan.sources[i];
    if (s.device_range != nullptr) {  // over a planner's row lists
      ListedSpan(s, head_dim, &m);
      continue;
    }
    m.cached = IsCached(s, head_dim, &m);
    m.direct = !m.cached && IsDirect(s, head_dim, &m);
    const int64_t run_max = debug_.run_copy_max_bytes < 0
                                ? kRunCopyMaxBytes
                                : debug_.run_copy_max_bytes;
    m.run =
        m.direct && m.count * kernels::RowBytes(m.dtype, head_dim) <= run_max;
    m.listed = !m.cached && !m.direct && run_max > 0 &&
               IsListedPinned(s, head_dim, &m);
    if (m.listed) m.direct = m.run = true;
  }
  // Staged K rows, staged V rows, explicit positions: one upload from the
  // staging buffer; then each direct span's K and V.
  int64_t off = 0;
  auto place_rows = [&](bool direct, bool values) {
    for (SpanMeta& m : plan.spans) {
      if (m.direct != direct || m.cached) continue;
      (values ? m.v_off : m.k_off) = off;
      off = AlignUp(off + m.count * kernels::RowBytes(m.dtype, head_dim));
    }
  };
  place_rows(false, false);
  place_rows(false, true);
  off = PlaceLists(plan, off);
  plan.n_runs = 0;
  for (const SpanMeta& m : plan.spans) plan.n_runs += m.run ? 2 * m.runs : 0;
  plan.staged_bytes = off;
  place_rows(true, false);
  place_rows(true, true);
  plan.bytes = off;
}

// A span over a planner's row lists: its rows read in place, from store
// rows in device memory or from mapped pinned segment rows (the store
// names only those), with the lists and their range.
void DeviceBackend::ListedSpan(const kernels::KvSpan& s, int head_dim,
                               SpanMeta* m) {
  const int64_t bytes = s.rows_extent * kernels::RowBytes(s.dtype, head_dim);
  m->cached = IsCached(s, head_dim, m);
  if (!m->cached && planner_->FindCacheRows(s.k, &m->cache_k) &&
      planner_->FindCacheRows(s.v, &m->cache_v)) {
    m->cached = true;  // a copy-mode cache's arena (the planner's)
  }
  if (!m->cached && arena_->Mapped(s.k, bytes, &m->cache_k.ptr) &&
      arena_->Mapped(s.v, bytes, &m->cache_v.ptr)) {
    m->cache_k.bytes = m->cache_v.bytes = bytes;
    m->cached = true;
  }
  if (!m->cached) {  // never named by a store: a bug, not a wrong answer
    Ok(absl::InternalError("listed span over rows the device cannot read"));
    return;
  }
  m->list_rows = reinterpret_cast<uintptr_t>(s.rows);
  m->list_positions = reinterpret_cast<uintptr_t>(s.positions);
  m->list_range = reinterpret_cast<uintptr_t>(s.device_range);
}

// A span whose K and V rows are each one contiguous run of pinned arena
// memory (a selected cluster or a whole segment head, stored by cluster):
// the device copies it from there.
bool DeviceBackend::IsDirect(const kernels::KvSpan& s, int head_dim,
                             SpanMeta* m) const {
  if (s.rows != nullptr || s.stride != head_dim || s.count == 0) return false;
  const int64_t bytes = s.count * kernels::RowBytes(s.dtype, head_dim);
  m->runs = 1;
  return arena_->Mapped(s.k, bytes, &m->k_src) &&
         arena_->Mapped(s.v, bytes, &m->v_src);
}

// A span that names rows of a pinned segment head through a row list (a
// sparse selection): the device gathers them from there, one copy_runs
// item per run of consecutive rows.
bool DeviceBackend::IsListedPinned(const kernels::KvSpan& s, int head_dim,
                                   SpanMeta* m) const {
  if (s.rows == nullptr || s.stride != head_dim || s.count == 0) return false;
  int32_t last = 0;
  m->runs = 1;
  for (int64_t r = 0; r < s.count; ++r) {
    if (s.rows[r] < 0) return false;
    last = std::max(last, s.rows[r]);
    if (r > 0 && s.rows[r] != s.rows[r - 1] + 1) ++m->runs;
  }
  const int64_t bytes =
      (int64_t{last} + 1) * kernels::RowBytes(s.dtype, head_dim);
  return arena_->Mapped(s.k, bytes, &m->k_src) &&
         arena_->Mapped(s.v, bytes, &m->v_src);
}

int64_t DeviceBackend::PlaceLists(KvPlan& plan, int64_t off) {
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    SpanMeta& m = plan.spans[i];
    const kernels::KvSpan& s = *plan.sources[i];
    m.pos_off = m.rows_off = -1;
    if (PlainRun(s) || m.list_range != 0) continue;
    m.pos_off = off;
    off = AlignUp(off + m.count * static_cast<int64_t>(sizeof(int64_t)));
  }
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    SpanMeta& m = plan.spans[i];
    if (!m.cached || plan.sources[i]->rows == nullptr || m.list_range != 0) {
      continue;
    }
    m.rows_off = off;
    off = AlignUp(off + m.count * static_cast<int64_t>(sizeof(int32_t)));
  }
  return off;
}

bool DeviceBackend::SetSplits(dev::AttentionArgs* a, int64_t max_rows,
                              int64_t* ws_bytes) {
  // Split-K for long rows (a device's choice; the host form ignores it).
  a->splits = dev::AttentionSplits(a->n_q, a->n_heads, max_rows);
  *ws_bytes =
      dev::AttentionWorkspaceBytes(a->n_q, a->n_heads, a->head_dim, a->splits);
  a->workspace = DevPtr{};
  if (*ws_bytes == 0) return true;
  if (!GrowDevice(attn_ws_dev_, *ws_bytes)) return false;
  a->workspace = attn_ws_dev_.ptr;
  return true;
}

void DeviceBackend::AddCachedReads(const KvPlan& plan,
                                   std::vector<Range>* reads) {
  for (const SpanMeta& m : plan.spans) {
    if (!m.cached) continue;
    reads->push_back(m.cache_k);
    reads->push_back(m.cache_v);
    if (m.list_range != 0) {  // the lists, written on the device
      reads->push_back({DevPtr{m.list_rows}, m.count * 4});
      reads->push_back({DevPtr{m.list_positions}, m.count * 8});
      reads->push_back({DevPtr{m.list_range}, 16});
      ++copies_.listed_spans;
      continue;
    }
    copies_.cached_rows += m.count;
  }
}

// A span over store rows in device memory (a block cache's, with an index
// list, or a run of a sink/tail mirror): the ranges the attention reads.
bool DeviceBackend::IsCached(const kernels::KvSpan& s, int head_dim,
                             SpanMeta* m) const {
  // Descriptors have no stride: cache rows are dense (as IsDirect asks).
  if (s.count == 0 || s.stride != head_dim ||
      !cache_rows_->Find(s.k, &m->cache_k) ||
      !cache_rows_->Find(s.v, &m->cache_v)) {
    return false;
  }
  if (s.rows == nullptr) {  // a run: just its rows
    const int64_t bytes = s.count * kernels::RowBytes(s.dtype, head_dim);
    m->cache_k.bytes = std::min(m->cache_k.bytes, bytes);
    m->cache_v.bytes = std::min(m->cache_v.bytes, bytes);
  }
  return true;
}

// Enqueues the H2D copies of the direct spans' rows into the scratch at kv.
bool DeviceBackend::CopyDirectSpans(const KvPlan& plan, DevPtr kv,
                                    int head_dim) {
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const SpanMeta& m = plan.spans[i];
    if (!m.direct || m.run) continue;
    const kernels::KvSpan& s = *plan.sources[i];
    const int64_t bytes = m.count * kernels::RowBytes(m.dtype, head_dim);
    if (!Ok(rt_->CopyH2D(kv + m.k_off, s.k, bytes, stream_)) ||
        !Ok(rt_->CopyH2D(kv + m.v_off, s.v, bytes, stream_))) {
      return false;
    }
    copies_.direct_bytes += 2 * bytes;
    copies_.direct_copies += 2;
  }
  return true;
}

bool DeviceBackend::MakeRunItems(const KvPlan& plan, DevPtr kv, int head_dim) {
  const size_t before = run_items_.size();
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const SpanMeta& m = plan.spans[i];
    if (!m.run) continue;
    const int32_t* rows = plan.sources[i]->rows;  // null: one run
    const int64_t row = kernels::RowBytes(m.dtype, head_dim);
    // Runs of consecutive stored rows: [first, first + n) to row `at`.
    for (int64_t at = 0; at < m.count;) {
      const int64_t first = rows != nullptr ? rows[at] : 0;
      int64_t n = rows != nullptr ? 1 : m.count;
      while (rows != nullptr && at + n < m.count && rows[at + n] == first + n) {
        ++n;
      }
      for (const auto& [src, dst] :
           {std::pair{m.k_src, m.k_off}, std::pair{m.v_src, m.v_off}}) {
        run_items_.push_back({(kv + dst + at * row).addr,
                              static_cast<int64_t>((src + first * row).addr),
                              n * row, 0});
      }
      at += n;
    }
  }
  const int64_t made = static_cast<int64_t>(run_items_.size() - before);
  if (made == plan.n_runs) return true;
  return Ok(absl::InternalError(
      absl::StrCat("copy_runs: ", made, " runs, ", plan.n_runs, " planned")));
}

// One op copies every run of the part (a selected cluster's K or V rows)
// from mapped pinned memory into the scratch: GPU.md's FetchMisses reads
// the by-cluster runs with 16-byte loads in one launch, where a DMA copy
// per run costs a driver call each (thousands per decode step).
void DeviceBackend::CopyRuns(DevPtr items) {
  if (run_items_.empty()) return;
  dev::ScatterRowsArgs a;  // src null: each item's `from` is its address
  a.items = items;
  a.n = static_cast<int64_t>(run_items_.size());
  std::vector<Range> reads = {
      {a.items, a.n * static_cast<int64_t>(sizeof(dev::ScatterItem))}};
  std::vector<Range> writes;
  for (const dev::ScatterItem& it : run_items_) {
    reads.push_back({DevPtr{static_cast<uint64_t>(it.from)}, it.bytes});
    writes.push_back({DevPtr{it.dst}, it.bytes});
    copies_.direct_bytes += it.bytes;
    copies_.run_bytes += it.bytes;
  }
  ++copies_.run_ops;
  Run(
      "copy_runs", std::move(reads), std::move(writes),
      [a](dev::OpContext& c) {
        const auto* items = c.In<dev::ScatterItem>(a.items, a.n);
        for (int64_t i = 0; i < a.n; ++i) {
          const dev::ScatterItem& it = items[i];
          std::memcpy(
              c.Out<char>(dev::DevPtr{it.dst}, it.bytes),
              c.In<char>(dev::DevPtr{static_cast<uint64_t>(it.from)}, it.bytes),
              static_cast<size_t>(it.bytes));
        }
      },
      Kernel(&dev::OpLaunchers::ScatterRows, a));
}

// Copies the staged spans' rows (index lists resolved) and every explicit
// position list into the staging section [0, plan.staged_bytes).
void DeviceBackend::GatherRows(const KvPlan& plan, char* dst, int head_dim) {
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const SpanMeta& m = plan.spans[i];
    const kernels::KvSpan& s = *plan.sources[i];
    const int64_t stored = kernels::RowBytes(s.dtype, s.stride);
    const int64_t used = kernels::RowBytes(s.dtype, head_dim);
    if (m.rows_off >= 0) {
      std::memcpy(dst + m.rows_off, s.rows,
                  sizeof(int32_t) * static_cast<size_t>(s.count));
    }
    for (int64_t r = 0; r < (m.direct || m.cached ? 0 : s.count); ++r) {
      const int64_t row = s.rows != nullptr ? s.rows[r] : r;
      std::memcpy(dst + m.k_off + r * used,
                  static_cast<const char*>(s.k) + row * stored, used);
      std::memcpy(dst + m.v_off + r * used,
                  static_cast<const char*>(s.v) + row * stored, used);
    }
    if (m.pos_off < 0) continue;
    int64_t* pos = reinterpret_cast<int64_t*>(dst + m.pos_off);
    for (int64_t r = 0; r < s.count; ++r)
      pos[r] = kernels::SpanRowPosition(s, r);
  }
}

dev::AttentionArgs DeviceBackend::RowArgs(const AttentionSpec& spec,
                                          int64_t row, int64_t n,
                                          Activation q) const {
  dev::AttentionArgs a;
  a.q = Rows(q, row, n).ptr;
  a.q_pos = pos_dev_.ptr + row * static_cast<int64_t>(sizeof(int64_t));
  a.n_q = static_cast<int>(n);
  a.n_heads = spec.n_heads;
  a.head_dim = spec.head_dim;
  a.scale = spec.scale;
  a.softcap = spec.softcap;
  a.window = spec.window;
  return a;
}

void DeviceBackend::RunAttention(std::string name, const dev::AttentionArgs& a,
                                 std::vector<Range> reads,
                                 std::vector<Range> writes) {
  copies_.one_dtype_launches += a.kv_dtype >= 0;
  Run(
      std::move(name), std::move(reads), std::move(writes),
      [a](dev::OpContext& c) { AttendFromTables(a, c); },
      Kernel(&dev::OpLaunchers::Attention, a));
}

char* DeviceBackend::ReserveStaging(int64_t bytes) {
  if (kv_stage_used_ + bytes > kv_stage_.bytes) {
    // Earlier parts' copies must finish before the staging is rewritten
    // (streamed parts' copies too: the compute stream waited for each).
    // Layers that do not wait for the device use it one after another:
    // room for all of them next time, twice over (a step's use grows as
    // its segments do, and each growth is a wait).
    if (!Sync() || !GrowStaging(kv_stage_, 2 * (kv_stage_used_ + bytes))) {
      return nullptr;
    }
    kv_stage_used_ = 0;
  }
  char* host = kv_stage_.host + kv_stage_used_;
  if (bytes > 0 && !Ok(rt_->HostWrite(host, bytes))) return nullptr;
  kv_stage_used_ += bytes;
  return host;
}

}  // namespace ckv
