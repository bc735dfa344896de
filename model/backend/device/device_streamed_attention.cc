// DeviceBackend's streamed attention (GPU.md: "multi-token appends to an
// offloaded session ... stream old segments H2D through two staging buffers
// while the other is attended, merge the split partials").
//
// A part whose K/V rows to copy (staged or straight from pinned segments)
// exceed the stream chunk is cut into pieces packed into chunks of at most
// that many bytes. Chunk c lands in landing buffer c % 2, copied on the copy
// stream; the compute stream waits for the copy (event filled), folds the
// chunk's rows into a running softmax state (the attention op with a state:
// max, weight sum, unnormalised accumulator per query row and head) and
// records drained; the copy of chunk c + 2 waits for that. So chunk c + 1
// copies while chunk c is attended, device memory holds two chunks rather
// than the whole context, and a final op writes out = acc / sum. Rows the
// device already holds (block caches, mirrors, resident segments) are read
// in place by chunk 0. Only the small tables (positions, row lists, each
// chunk's span and head tables) are uploaded up front, on the compute
// stream.
#include <algorithm>
#include <cstring>

#include "kernels/ref/ops.h"
#include "model/backend/device/device_backend.h"

namespace ckv {

namespace dev = kernels::device;

bool DeviceBackend::StreamsPlan(const KvPlan& plan, int head_dim) const {
  int64_t copied = 0;
  for (const SpanMeta& m : plan.spans) {
    if (!m.cached) copied += 2 * m.count * kernels::RowBytes(m.dtype, head_dim);
  }
  return copied > stream_chunk_bytes_;
}

// Lays out a streamed part. Uploaded (the staging buffer's and the device
// scratch's first meta_bytes): explicit positions, block caches' row lists,
// then each chunk's span and head tables. Host only, after them: the
// gathered rows of staged spans (their copies' source). Pieces fill chunks
// in span order, so each chunk's pieces are contiguous.
void DeviceBackend::PlanStreamed(KvPlan& plan, int n_heads, int head_dim) {
  StreamPlan& sp = stream_plan_;
  sp = StreamPlan{};
  const int n = static_cast<int>(plan.spans.size());
  int64_t off = PlaceLists(plan, 0);
  int64_t cap = stream_chunk_bytes_;  // at least one row of K and V
  for (SpanMeta& m : plan.spans) {
    if (m.listed) m.direct = m.run = false;  // gathered on the host here
    if (!m.cached) {
      cap = std::max(cap, 2 * AlignUp(kernels::RowBytes(m.dtype, head_dim)));
    }
  }
  int chunk = 0;
  int64_t fill = 0;
  for (int i = 0; i < n; ++i) {
    sp.span_pieces.push_back(static_cast<int>(sp.pieces.size()));
    const SpanMeta& m = plan.spans[i];
    if (m.cached) continue;
    const int64_t row = kernels::RowBytes(m.dtype, head_dim);
    for (int64_t r = 0; r < m.count;) {
      const int64_t room = (cap - fill) / 2 / kAlign * kAlign;  // K or V
      const int64_t take = std::min(m.count - r, room / row);
      if (take <= 0) {
        ++chunk;
        fill = 0;
        continue;
      }
      if (sp.chunk_pieces.size() <= static_cast<size_t>(chunk)) {
        sp.chunk_pieces.push_back(static_cast<int>(sp.pieces.size()));
      }
      sp.pieces.push_back(Piece{i, chunk, r, take, fill});
      fill += 2 * AlignUp(take * row);
      r += take;
      sp.fill.resize(static_cast<size_t>(chunk) + 1);
      sp.fill[chunk] = fill;
    }
  }
  sp.span_pieces.push_back(static_cast<int>(sp.pieces.size()));
  const int chunks = static_cast<int>(sp.fill.size());
  for (int c = 0; c < chunks; ++c) {
    // Entries and rows of each head's list in chunk c.
    int entries = 0;
    int64_t most = 0;
    for (int h = 0; h < n_heads; ++h) {
      int64_t rows = 0;
      const auto [begin, count] = plan.heads[h];
      for (int j = begin; j < begin + count; ++j) {
        const int span = plan.order[j];
        if (plan.spans[span].cached) {
          if (c == 0) ++entries, rows += plan.spans[span].count;
          continue;
        }
        for (int k = sp.span_pieces[span]; k < sp.span_pieces[span + 1]; ++k) {
          if (sp.pieces[k].chunk == c) ++entries, rows += sp.pieces[k].count;
        }
      }
      most = std::max(most, rows);
    }
    sp.entries.push_back(entries);
    sp.max_rows.push_back(most);
    sp.desc_off.push_back(off);
    off = AlignUp(off +
                  entries * static_cast<int64_t>(sizeof(dev::AttnSpanDesc)));
    sp.heads_off.push_back(off);
    off = AlignUp(off + n_heads * 2 * static_cast<int64_t>(sizeof(int32_t)));
  }
  sp.meta_bytes = off;
  for (int i = 0; i < n; ++i) {  // staged spans' rows, gathered on the host
    SpanMeta& m = plan.spans[i];
    if (m.cached || m.direct) continue;
    const int64_t bytes = m.count * kernels::RowBytes(m.dtype, head_dim);
    m.k_off = off;
    off = AlignUp(off + bytes);
    m.v_off = off;
    off = AlignUp(off + bytes);
  }
  sp.host_bytes = off;
}

void DeviceBackend::WriteStreamedTables(const KvPlan& plan, char* dst,
                                        DevPtr kv, int head_dim) const {
  const StreamPlan& sp = stream_plan_;
  for (size_t c = 0; c < sp.fill.size(); ++c) {
    auto* desc = reinterpret_cast<dev::AttnSpanDesc*>(dst + sp.desc_off[c]);
    auto* heads = reinterpret_cast<int32_t*>(dst + sp.heads_off[c]);
    const DevPtr landing = landing_[c % 2].ptr;
    int32_t e = 0;
    for (size_t h = 0; h < plan.heads.size(); ++h) {
      heads[2 * h] = e;
      const auto [begin, count] = plan.heads[h];
      for (int j = begin; j < begin + count; ++j) {
        const int span = plan.order[j];
        const SpanMeta& m = plan.spans[span];
        if (m.cached) {
          if (c == 0) desc[e++] = SpanDesc(m, kv, head_dim);
          continue;
        }
        const int64_t row = kernels::RowBytes(m.dtype, head_dim);
        for (int k = sp.span_pieces[span]; k < sp.span_pieces[span + 1]; ++k) {
          const Piece& piece = sp.pieces[k];
          if (piece.chunk != static_cast<int>(c)) continue;
          dev::AttnSpanDesc& d = desc[e++];
          d = dev::AttnSpanDesc{};
          d.k = (landing + piece.off).addr;
          d.v = (landing + piece.off + AlignUp(piece.count * row)).addr;
          d.bytes = piece.count * row;
          d.count = piece.count;
          d.first_pos = m.first_pos + piece.first;
          if (m.pos_off >= 0) {
            d.positions = (kv + m.pos_off +
                           piece.first * static_cast<int64_t>(sizeof(int64_t)))
                              .addr;
          }
          d.dtype = static_cast<int32_t>(m.dtype);
        }
      }
      heads[2 * h + 1] = e - heads[2 * h];
    }
  }
}

// Both landing buffers hold `bytes` (after every earlier use: growing
// frees them).
bool DeviceBackend::GrowLandings(int64_t bytes) {
  if (landing_[0].bytes >= bytes && landing_[1].bytes >= bytes) return true;
  if (!Ok(rt_->Synchronize(copy_stream_)) || !Sync()) {
    return false;
  }
  return GrowDevice(landing_[0], bytes) && GrowDevice(landing_[1], bytes);
}

bool DeviceBackend::CopyChunk(const KvPlan& plan, int c, const char* staged,
                              int head_dim) {
  const int slot = c % 2;
  // Chunk c - 2's attention read this landing buffer.
  if (c >= 2 && !debug_.stream_skip_drain_wait &&
      !Ok(rt_->Wait(copy_stream_, drained_[slot]))) {
    return false;
  }
  const StreamPlan& sp = stream_plan_;
  const int end = c + 1 < static_cast<int>(sp.chunk_pieces.size())
                      ? sp.chunk_pieces[c + 1]
                      : static_cast<int>(sp.pieces.size());
  for (int i = sp.chunk_pieces[c]; i < end; ++i) {  // chunk c's pieces
    const Piece& piece = sp.pieces[i];
    const SpanMeta& m = plan.spans[piece.span];
    const kernels::KvSpan& s = *plan.sources[piece.span];
    const int64_t row = kernels::RowBytes(m.dtype, head_dim);
    const int64_t bytes = piece.count * row, skip = piece.first * row;
    const char* k = m.direct ? static_cast<const char*>(s.k) + skip
                             : staged + m.k_off + skip;
    const char* v = m.direct ? static_cast<const char*>(s.v) + skip
                             : staged + m.v_off + skip;
    const DevPtr dst = landing_[slot].ptr + piece.off;
    if (!Ok(rt_->CopyH2D(dst, k, bytes, copy_stream_)) ||
        !Ok(rt_->CopyH2D(dst + AlignUp(bytes), v, bytes, copy_stream_))) {
      return false;
    }
    copies_.streamed_bytes += 2 * bytes;
  }
  return Ok(rt_->Record(filled_[slot], copy_stream_));
}

void DeviceBackend::AttendStreamed(const AttentionSpec& spec,
                                   const AttentionPart& p, KvPlan& plan,
                                   Activation q, Activation out) {
  PlanStreamed(plan, spec.n_heads, spec.head_dim);
  const StreamPlan& sp = stream_plan_;
  char* host = ReserveStaging(sp.host_bytes);
  if (host == nullptr) return;
  GatherRows(plan, host, spec.head_dim);
  const int64_t meta = std::max(sp.meta_bytes, kAlign);
  if (kv_dev_used_ + meta > kv_dev_.bytes) {
    if (!GrowDevice(kv_dev_, meta)) return;
    kv_dev_used_ = 0;
  }
  const DevPtr kv = kv_dev_.ptr + kv_dev_used_;
  kv_dev_used_ += meta;
  const int64_t largest = *std::max_element(sp.fill.begin(), sp.fill.end());
  const int64_t state_bytes = int64_t{p.n} * spec.n_heads *
                              (int64_t{spec.head_dim} + 2) *
                              static_cast<int64_t>(sizeof(float));
  if (!GrowLandings(largest) || !GrowDevice(state_dev_, state_bytes)) return;
  WriteStreamedTables(plan, host, kv, spec.head_dim);
  if (!Ok(rt_->CopyH2D(kv, host, sp.meta_bytes, stream_))) return;
  copies_.staged_bytes += sp.meta_bytes;
  cache_rows_->Flush();  // store rows written for this part land first
  // The landing buffers' earlier readers (parts before) are done first.
  if (!Ok(rt_->Record(stream_start_, stream_)) ||
      !Ok(rt_->Wait(copy_stream_, stream_start_))) {
    return;
  }
  dev::AttentionArgs a = RowArgs(spec, p.row, p.n, q);
  a.state = state_dev_.ptr;
  a.kv_dtype = std::max(SharedDType(plan, -2), -1);
  const Range state = {state_dev_.ptr, state_bytes};
  for (int c = 0; c < static_cast<int>(sp.fill.size()); ++c) {
    const int slot = c % 2;
    if (!CopyChunk(plan, c, host, spec.head_dim) ||
        !Ok(rt_->Wait(stream_, filled_[slot]))) {
      return;
    }
    a.spans = kv + sp.desc_off[c];
    a.heads = kv + sp.heads_off[c];
    a.n_spans = sp.entries[c];
    a.fresh = c == 0;
    int64_t ws_bytes = 0;
    if (!SetSplits(&a, sp.max_rows[c], &ws_bytes)) return;
    std::vector<Range> reads = {Rows(q, p.row, p.n),
                                {a.q_pos, p.n * int64_t{sizeof(int64_t)}},
                                {kv, sp.meta_bytes},
                                {landing_[slot].ptr, sp.fill[c]}};
    if (c > 0) reads.push_back(state);
    if (c == 0) AddCachedReads(plan, &reads);  // store rows: read by chunk 0
    std::vector<Range> writes = {state};
    if (ws_bytes > 0) writes.push_back({a.workspace, ws_bytes});
    RunAttention("attention_chunk", a, std::move(reads), std::move(writes));
    if (!ok() || !Ok(rt_->Record(drained_[slot], stream_))) return;
    copies_.largest_chunk_bytes =
        std::max(copies_.largest_chunk_bytes, sp.fill[c]);
  }
  dev::AttentionFinishArgs f;
  f.state = state_dev_.ptr;
  f.out = Rows(out, p.row, p.n).ptr;
  f.n = p.n * spec.n_heads;
  f.head_dim = spec.head_dim;
  Run(
      "attention_finish", {state}, {Rows(out, p.row, p.n)},
      [f](dev::OpContext& c) {
        kernels::ref::AttentionFinish(
            c.In<float>(f.state, f.n * (int64_t{f.head_dim} + 2)), f.n,
            f.head_dim, c.Out<float>(f.out, f.n * f.head_dim));
      },
      Kernel(&dev::OpLaunchers::AttentionFinish, f));
  ++copies_.streamed_parts;
  copies_.streamed_chunks += static_cast<int64_t>(sp.fill.size());
}

}  // namespace ckv
