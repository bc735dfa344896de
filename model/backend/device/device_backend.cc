#include "model/backend/device/device_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/device/fake_runtime.h"
#include "model/backend/kernel_args.h"

namespace ckv {

namespace cpu = kernels::cpu;
namespace dev = kernels::device;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kAlign = 64;                      // sections of a scratch
constexpr int64_t kUploadChunk = int64_t{4} << 20;  // weight upload staging

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t FloatBytes(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float));
}

// A span's identity for deduplication: every field the attention kernel
// compares (two heads attend together when their lists are field-equal).
using SpanKey = std::tuple<const void*, const void*, int, int64_t, int64_t,
                           int64_t, const void*, const void*, const void*>;

SpanKey KeyOf(const kernels::KvSpan& s) {
  return {s.k,         s.v,     static_cast<int>(s.dtype),
          s.stride,    s.count, s.first_pos,
          s.positions, s.rows,  s.row_positions};
}

bool PlainRun(const kernels::KvSpan& s) {
  return s.positions == nullptr && s.rows == nullptr &&
         s.row_positions == nullptr;
}

}  // namespace

// ---- Set-up ---------------------------------------------------------------

DeviceBackend::DeviceBackend(dev::Runtime& runtime, std::string name,
                             std::string device, DeviceBackendDebug debug,
                             ResidencyOptions residency)
    : rt_(&runtime), debug_(debug) {
  info_.name = std::move(name);
  info_.device = std::move(device);
  Init(residency);
}

DeviceBackend::DeviceBackend(std::unique_ptr<dev::Runtime> runtime,
                             std::string name, std::string device,
                             DeviceBackendDebug debug,
                             ResidencyOptions residency)
    : owned_(std::move(runtime)), rt_(owned_.get()), debug_(debug) {
  info_.name = std::move(name);
  info_.device = std::move(device);
  Init(residency);
}

DeviceBackend::~DeviceBackend() { FreeAll(); }

void DeviceBackend::Init(ResidencyOptions residency) {
  info_.device_memory_bytes = rt_->Info().total_bytes;
  arena_ = std::make_shared<PinnedArena>(*rt_, owned_);
  // The resident segment tables may take a quarter of the device.
  planner_ = std::make_shared<DevicePlanner>(
      *rt_, owned_,
      debug_.table_bytes > 0 ? debug_.table_bytes
                             : info_.device_memory_bytes / 4,
      debug_.planner);
  index_builder_ = std::make_shared<DeviceIndexBuilder>(*rt_, owned_, arena_,
                                                        debug_.index_builder);
  auto st = rt_->CreateStream(dev::kHighestPriority);
  if (Ok(st.status())) stream_ = *st;
  // Block-cache copies go on the compute stream, ahead of the attention
  // that reads them.
  if (residency.budget_bytes <= 0) {
    residency.budget_bytes = info_.device_memory_bytes / 2;
  }
  cache_rows_ = std::make_shared<DeviceCacheArena>(*rt_, owned_, stream_,
                                                   arena_, residency);
}

// Frees every buffer (errors ignored: the backend is going away). Free and
// HostFree wait for the device's work.
void DeviceBackend::FreeAll() {
  auto free_dev = [this](DevBuf& b) {
    if (!b.ptr.null()) rt_->Free(b.ptr).IgnoreError();
    b = DevBuf{};
  };
  for (Buffer& b : buffers_) free_dev(b.mem);
  for (DevBuf* b :
       {&pos_dev_, &tok_dev_, &kv_dev_, &gathered_dev_, &logits_dev_}) {
    free_dev(*b);
  }
  for (auto& [key, ptr] : resident_) rt_->Free(ptr).IgnoreError();
  resident_.clear();
  for (Staging* s : {&pos_stage_, &tok_stage_, &qkv_stage_, &kv_stage_,
                     &logits_stage_, &upload_stage_}) {
    if (s->host != nullptr && s->pageable == nullptr) {
      rt_->HostFree(s->host).IgnoreError();
    }
    *s = Staging{};
  }
}

StoreEnv DeviceBackend::store_env() {
  StoreEnv env;
  env.arena = debug_.heap_arena ? HeapArena() : arena_;
  if (!debug_.host_selection) env.planner = planner_;
  if (!debug_.host_kmeans) env.index_builder = index_builder_;
  if (!debug_.host_cache_rows) env.cache_rows = cache_rows_;
  return env;
}

bool DeviceBackend::Ok(const absl::Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
  return s.ok();
}

// ---- Memory ---------------------------------------------------------------

dev::Range DeviceBackend::Rows(Activation a, int64_t row, int64_t n) const {
  const int64_t w = Width(a);
  if (n < 0) n = rows_ - row;
  return Range{Ptr(a) + FloatBytes(row * w), FloatBytes(n * w)};
}

bool DeviceBackend::GrowDevice(DevBuf& b, int64_t bytes) {
  if (!ok()) return false;
  if (b.bytes >= bytes) return true;
  if (!b.ptr.null() && !Ok(rt_->Free(b.ptr))) return false;
  b = DevBuf{};
  auto p = rt_->Malloc(std::max<int64_t>(bytes, kAlign));
  if (!Ok(p.status())) return false;
  b.ptr = *p;
  b.bytes = std::max<int64_t>(bytes, kAlign);
  return true;
}

// Grows to at least `bytes` (doubling); the old contents are dropped.
bool DeviceBackend::GrowStaging(Staging& s, int64_t bytes) {
  if (!ok()) return false;
  if (s.bytes >= bytes) return true;
  const int64_t n = std::max({bytes, 2 * s.bytes, kAlign});
  if (debug_.pageable_staging) {
    s.pageable = std::make_unique<char[]>(static_cast<size_t>(n));
    s.host = s.pageable.get();
    s.bytes = n;
    return true;
  }
  if (s.host != nullptr && !Ok(rt_->HostFree(s.host))) return false;
  s = Staging{};
  auto p = rt_->HostAllocPinned(n);
  if (!Ok(p.status())) return false;
  s.host = static_cast<char*>(*p);
  s.bytes = n;
  return true;
}

bool DeviceBackend::Upload(DevPtr dst, const void* src, int64_t bytes,
                           Staging& staging) {
  const char* from = static_cast<const char*>(src);
  for (int64_t off = 0; off < bytes; off += kUploadChunk) {
    const int64_t n = std::min(kUploadChunk, bytes - off);
    // The staging's previous H2D copy may still be reading it.
    if (!Ok(rt_->Synchronize(stream_)) || !GrowStaging(staging, n)) {
      return false;
    }
    if (!Ok(rt_->HostWrite(staging.host, n))) return false;
    std::memcpy(staging.host, from + off, static_cast<size_t>(n));
    if (!Ok(rt_->CopyH2D(dst + off, staging.host, n, stream_))) return false;
  }
  return true;
}

dev::DevPtr DeviceBackend::Resident(const void* host, int64_t bytes) {
  if (!ok() || host == nullptr || bytes <= 0) return DevPtr{};
  const auto key = std::make_pair(host, bytes);
  if (auto it = resident_.find(key); it != resident_.end()) return it->second;
  auto d = rt_->Malloc(bytes);
  if (!Ok(d.status())) return DevPtr{};
  resident_[key] = *d;
  resident_bytes_ += bytes;
  if (!Upload(*d, host, bytes, upload_stage_)) return DevPtr{};
  return *d;
}

void DeviceBackend::Run(std::string name, std::vector<Range> reads,
                        std::vector<Range> writes,
                        std::function<void(dev::OpContext&)> body, Site site) {
  if (!ok()) return;
  dev::Op op;
  op.name = std::move(name);
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  op.body = std::move(body);
  Ok(rt_->Launch(std::move(op), stream_, site));
}

// ---- Steps ----------------------------------------------------------------

Activation DeviceBackend::NewActivation(int64_t width) {
  buffers_.push_back(Buffer{width, DevBuf{}});
  return Activation{static_cast<int>(buffers_.size()) - 1};
}

void DeviceBackend::BeginStep(absl::Span<const int64_t> positions) {
  rows_ = static_cast<int64_t>(positions.size());
  pos_.assign(positions.begin(), positions.end());
  // Capacity grows here, outside any op: contents are undefined anyway.
  for (Buffer& b : buffers_) {
    if (!GrowDevice(b.mem, FloatBytes(rows_ * b.width))) return;
  }
  const int64_t bytes = rows_ * static_cast<int64_t>(sizeof(int64_t));
  if (!GrowDevice(pos_dev_, bytes)) return;
  Upload(pos_dev_.ptr, pos_.data(), bytes, pos_stage_);
}

void DeviceBackend::EndStep() {
  // The next step rewrites the staging buffers from the host.
  if (ok()) Ok(rt_->Synchronize(stream_));
}

void DeviceBackend::Embed(const Matrix& table, absl::Span<const int32_t> tokens,
                          float scale, Activation out) {
  const int64_t row_bytes = kernels::RowBytes(table.type, table.cols);
  const int64_t table_bytes = table.rows * row_bytes;
  const DevPtr t = Resident(table.data, table_bytes);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t tok_bytes = n * static_cast<int64_t>(sizeof(int32_t));
  if (!GrowDevice(tok_dev_, tok_bytes) ||
      !Upload(tok_dev_.ptr, tokens.data(), tok_bytes, tok_stage_)) {
    return;
  }
  const DevPtr tok = tok_dev_.ptr, x = Ptr(out);
  const int64_t width = Width(out), cols = table.cols;
  const kernels::DType type = table.type;
  Run("embed", {{t, table_bytes}, {tok, tok_bytes}}, {Rows(out)},
      [=](dev::OpContext& c) {
        EmbedRows(c.In<uint8_t>(t, table_bytes), type, cols,
                  c.In<int32_t>(tok, n), n, scale, width,
                  c.Out<float>(x, n * width));
      });
}

void DeviceBackend::MatMul(const Matrix& w, Activation x, Activation y) {
  const int64_t w_bytes = w.rows * kernels::RowBytes(w.type, w.cols);
  const DevPtr wd = Resident(w.data, w_bytes);
  const DevPtr xd = Ptr(x), yd = Ptr(y);
  const int64_t n = rows_, n_in = w.cols, n_out = w.rows;
  const kernels::DType type = w.type;
  Run("matmul", {{wd, w_bytes}, Rows(x)}, {Rows(y)}, [=](dev::OpContext& c) {
    cpu::MatMul(nullptr, type, c.In<uint8_t>(wd, w_bytes), n_in, n_out,
                c.In<float>(xd, n * n_in), n, c.Out<float>(yd, n * n_out));
  });
}

void DeviceBackend::AddBias(Activation x, absl::Span<const float> bias) {
  const int64_t n = static_cast<int64_t>(bias.size());
  const DevPtr b = Resident(bias.data(), FloatBytes(n));
  const DevPtr xd = Ptr(x);
  const int64_t rows = rows_;
  Run("add_bias", {{b, FloatBytes(n)}}, {Rows(x)}, [=](dev::OpContext& c) {
    cpu::AddBias(c.Out<float>(xd, rows * n), c.In<float>(b, n), rows, n);
  });
}

void DeviceBackend::RmsNorm(Activation x, absl::Span<const float> weight,
                            float eps, Activation out) {
  const int64_t n = static_cast<int64_t>(weight.size());
  const DevPtr wd = Resident(weight.data(), FloatBytes(n));
  const DevPtr xd = Ptr(x), od = Ptr(out);
  const int64_t total = rows_ * Width(x);
  const bool in_place = x.id == out.id;
  std::vector<Range> reads = {{wd, FloatBytes(n)}};
  if (!in_place) reads.push_back(Rows(x));
  Run("rms_norm", std::move(reads), {Rows(out)}, [=](dev::OpContext& c) {
    float* y = c.Out<float>(od, total);
    const float* in = in_place ? y : c.In<float>(xd, total);
    cpu::RmsNorm(nullptr, in, c.In<float>(wd, n), total / n, n, eps, y);
  });
}

void DeviceBackend::Rope(Activation x, int n_heads, const RopeSpec& rope) {
  const int64_t n_factors = rope.freq_factors ? rope.rot_dims / 2 : 0;
  const DevPtr f = Resident(rope.freq_factors, FloatBytes(n_factors));
  const DevPtr xd = Ptr(x), pd = pos_dev_.ptr;
  const int64_t rows = rows_, width = Width(x);
  const int64_t pos_bytes = rows * static_cast<int64_t>(sizeof(int64_t));
  std::vector<Range> reads = {{pd, pos_bytes}};
  if (n_factors > 0) reads.push_back({f, FloatBytes(n_factors)});
  cpu::RopeParams p = CpuRopeParams(rope);  // freq_factors mapped below
  Run("rope", std::move(reads), {Rows(x)}, [=](dev::OpContext& c) mutable {
    p.freq_factors = n_factors > 0 ? c.In<float>(f, n_factors) : nullptr;
    cpu::Rope(nullptr, c.Out<float>(xd, rows * width), rows, n_heads,
              static_cast<int>(width / n_heads), c.In<int64_t>(pd, rows), p);
  });
}

void DeviceBackend::Gate(FfnActivation act, Activation gate, Activation up,
                         Activation out) {
  const int64_t n = rows_ * Width(gate);
  const DevPtr gd = Ptr(gate), ud = Ptr(up), od = Ptr(out);
  const bool gate_is_out = gate.id == out.id, up_is_out = up.id == out.id;
  std::vector<Range> reads;
  if (!gate_is_out) reads.push_back(Rows(gate));
  if (!up_is_out) reads.push_back(Rows(up));
  Run("gate", std::move(reads), {Rows(out)}, [=](dev::OpContext& c) {
    float* o = c.Out<float>(od, n);
    const float* g = gate_is_out ? o : c.In<float>(gd, n);
    const float* u = up_is_out ? o : c.In<float>(ud, n);
    if (act == FfnActivation::kGeluTanhGate) {
      cpu::GeluTanhGate(nullptr, g, u, n, o);
    } else {
      cpu::SwiGlu(nullptr, g, u, n, o);
    }
  });
}

void DeviceBackend::Add(Activation x, Activation y) {
  const int64_t n = rows_ * Width(x);
  const DevPtr xd = Ptr(x), yd = Ptr(y);
  Run("add", {Rows(y)}, {Rows(x)}, [=](dev::OpContext& c) {
    cpu::Add(c.Out<float>(xd, n), c.In<float>(yd, n), n);
  });
}

// ---- Attention (stage 1: selection on the host) -----------------------------

void DeviceBackend::Attention(int layer, const AttentionSpec& spec,
                              absl::Span<const AttentionPart> parts,
                              Activation q, Activation k, Activation v,
                              Activation out, ForwardProfile* profile) {
  const int64_t q_dim = Width(q), kv_dim = Width(k);
  const float *hq = nullptr, *hk = nullptr, *hv = nullptr;
  if (!FetchQkv(q, k, v, &hq, &hk, &hv)) {
    AppendLost(layer, parts, kv_dim);
    return;
  }
  // The synchronisation in FetchQkv finished every earlier copy out of the
  // KV staging: it is reused from its start.
  kv_stage_used_ = 0;
  // Every part's sparse decode plan in one planner batch (one upload, one
  // synchronisation for the layer), before the Selects that use them.
  for (const AttentionPart& p : parts) {
    p.cache->PrepareSelect(
        layer, {hq + p.row * q_dim, &pos_[p.row], static_cast<int>(p.n)});
  }
  planner_->RunQueued();
  for (const AttentionPart& p : parts) {
    const Clock::time_point t0 = profile ? Clock::now() : Clock::time_point{};
    p.cache->Append(layer, p.n, hk + p.row * kv_dim, hv + p.row * kv_dim);
    LayerQuery query{hq + p.row * q_dim, &pos_[p.row], static_cast<int>(p.n)};
    const Clock::time_point t1 = profile ? Clock::now() : Clock::time_point{};
    p.cache->Select(layer, query, &attend_);
    if (profile) profile->select_ns += NanosSince(t1);
    // A device error of the planner or the k-means builder (the store then
    // planned or clustered on the host) is the backend's: sticky, as every
    // other (AttendPart then skips).
    Ok(planner_->status());
    Ok(index_builder_->status());
    Ok(cache_rows_->status());
    AttendPart(spec, p, q, out);
    if (profile) profile->attention_ns += NanosSince(t0);
  }
}

bool DeviceBackend::FetchQkv(Activation q, Activation k, Activation v,
                             const float** hq, const float** hk,
                             const float** hv) {
  const int64_t qb = Rows(q).bytes, kb = Rows(k).bytes;
  if (!GrowStaging(qkv_stage_, qb + 2 * kb)) return false;
  char* h = qkv_stage_.host;
  if (!Ok(rt_->CopyD2H(h, Ptr(q), qb, stream_)) ||
      !Ok(rt_->CopyD2H(h + qb, Ptr(k), kb, stream_)) ||
      !Ok(rt_->CopyD2H(h + qb + kb, Ptr(v), kb, stream_))) {
    return false;
  }
  if (!debug_.skip_sync_before_host_read && !Ok(rt_->Synchronize(stream_))) {
    return false;
  }
  if (!Ok(rt_->HostRead(h, qb + 2 * kb))) return false;
  *hq = reinterpret_cast<const float*>(h);
  *hk = reinterpret_cast<const float*>(h + qb);
  *hv = reinterpret_cast<const float*>(h + qb + kb);
  return true;
}

// After an error the caches still get their rows (zeros), so that their
// bookkeeping stays consistent with the Commit that follows.
void DeviceBackend::AppendLost(int layer, absl::Span<const AttentionPart> parts,
                               int64_t kv_dim) {
  lost_.assign(static_cast<size_t>(rows_ * kv_dim), 0.0f);
  for (const AttentionPart& p : parts) {
    p.cache->Append(layer, p.n, lost_.data() + p.row * kv_dim,
                    lost_.data() + p.row * kv_dim);
  }
}

// The unique spans of attend_ (by content) with their places in the part's
// scratch: K rows, V rows, then explicit positions, each section aligned.
void DeviceBackend::PlanSpans(int n_heads, int head_dim) {
  plan_.spans.clear();
  plan_.sources.clear();
  plan_.order.clear();
  plan_.heads.clear();
  absl::flat_hash_map<SpanKey, int> index;
  for (int h = 0; h < n_heads; ++h) {
    const kernels::KvSpanList& list = attend_.per_head[h];
    plan_.heads.push_back({static_cast<int>(plan_.order.size()), list.count});
    for (int i = 0; i < list.count; ++i) {
      const kernels::KvSpan& s = list.spans[i];
      auto [it, fresh] =
          index.try_emplace(KeyOf(s), static_cast<int>(plan_.spans.size()));
      if (fresh) {
        plan_.spans.push_back(SpanMeta{s.dtype, s.count, s.first_pos});
        plan_.sources.push_back(&s);
      }
      plan_.order.push_back(it->second);
    }
  }
  for (size_t i = 0; i < plan_.spans.size(); ++i) {
    SpanMeta& m = plan_.spans[i];
    m.cached = IsCached(*plan_.sources[i], head_dim, &m);
    m.direct = !m.cached && IsDirect(*plan_.sources[i], head_dim);
  }
  // Staged K rows, staged V rows, explicit positions: one upload from the
  // staging buffer; then each direct span's K and V.
  int64_t off = 0;
  auto place_rows = [&](bool direct, bool values) {
    for (SpanMeta& m : plan_.spans) {
      if (m.direct != direct || m.cached) continue;
      (values ? m.v_off : m.k_off) = off;
      off = AlignUp(off + m.count * kernels::RowBytes(m.dtype, head_dim));
    }
  };
  place_rows(false, false);
  place_rows(false, true);
  for (size_t i = 0; i < plan_.spans.size(); ++i) {
    if (PlainRun(*plan_.sources[i])) continue;
    plan_.spans[i].pos_off = off;
    off = AlignUp(off +
                  plan_.spans[i].count * static_cast<int64_t>(sizeof(int64_t)));
  }
  for (size_t i = 0; i < plan_.spans.size(); ++i) {
    SpanMeta& m = plan_.spans[i];
    if (!m.cached || plan_.sources[i]->rows == nullptr) continue;
    m.rows_off = off;
    off = AlignUp(off + m.count * static_cast<int64_t>(sizeof(int32_t)));
  }
  plan_.staged_bytes = off;
  place_rows(true, false);
  place_rows(true, true);
  plan_.bytes = std::max<int64_t>(off, kAlign);
}

// A span whose K and V rows are each one contiguous run of pinned arena
// memory (a selected cluster or a whole segment head, stored by cluster):
// the device copies it from there.
bool DeviceBackend::IsDirect(const kernels::KvSpan& s, int head_dim) const {
  if (s.rows != nullptr || s.stride != head_dim || s.count == 0) return false;
  const int64_t bytes = s.count * kernels::RowBytes(s.dtype, head_dim);
  return arena_->Contains(s.k, bytes) && arena_->Contains(s.v, bytes);
}

// A span over store rows in device memory (a block cache's, with an index
// list, or a run of a sink/tail mirror): the ranges the attention reads.
bool DeviceBackend::IsCached(const kernels::KvSpan& s, int head_dim,
                             SpanMeta* m) const {
  if (s.count == 0 || !cache_rows_->Find(s.k, &m->cache_k) ||
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
bool DeviceBackend::CopyDirectSpans(DevPtr kv, int head_dim) {
  for (size_t i = 0; i < plan_.spans.size(); ++i) {
    const SpanMeta& m = plan_.spans[i];
    if (!m.direct) continue;
    const kernels::KvSpan& s = *plan_.sources[i];
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

// Copies the staged spans' rows (index lists resolved) and every explicit
// position list into the staging section [0, plan_.staged_bytes).
void DeviceBackend::GatherRows(char* dst, int head_dim) const {
  for (size_t i = 0; i < plan_.spans.size(); ++i) {
    const SpanMeta& m = plan_.spans[i];
    const kernels::KvSpan& s = *plan_.sources[i];
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

// One part: its attended rows into pinned staging, H2D into the device KV
// scratch, and the attention op over the rebased spans.
void DeviceBackend::AttendPart(const AttentionSpec& spec,
                               const AttentionPart& p, Activation q,
                               Activation out) {
  if (!ok()) return;
  PlanSpans(spec.n_heads, spec.head_dim);
  const int64_t bytes = plan_.bytes, staged = plan_.staged_bytes;
  if (kv_stage_used_ + staged > kv_stage_.bytes) {
    // Earlier parts' copies must finish before the staging is rewritten.
    if (!Ok(rt_->Synchronize(stream_)) || !GrowStaging(kv_stage_, staged)) {
      return;
    }
    kv_stage_used_ = 0;
  }
  char* host = kv_stage_.host + kv_stage_used_;
  if (staged > 0 && !Ok(rt_->HostWrite(host, staged))) return;
  GatherRows(host, spec.head_dim);
  kv_stage_used_ += staged;
  // The device scratch is reused in stream order (no wait needed).
  if (kv_dev_used_ + bytes > kv_dev_.bytes) {
    if (!GrowDevice(kv_dev_, bytes)) return;
    kv_dev_used_ = 0;
  }
  const DevPtr kv = kv_dev_.ptr + kv_dev_used_;
  kv_dev_used_ += bytes;
  if (staged > 0 && !Ok(rt_->CopyH2D(kv, host, staged, stream_))) return;
  copies_.staged_bytes += staged;
  if (!CopyDirectSpans(kv, spec.head_dim)) return;
  const Range qr = Rows(q, p.row, p.n), outr = Rows(out, p.row, p.n);
  const Range pr{pos_dev_.ptr + p.row * static_cast<int64_t>(sizeof(int64_t)),
                 p.n * static_cast<int64_t>(sizeof(int64_t))};
  const int64_t n_q = p.n, q_elems = qr.bytes / 4;
  const int head_dim = spec.head_dim;
  // The store rows written for this part (sinks, tail, cache misses) land
  // before the attention reads them.
  cache_rows_->Flush();
  std::vector<Range> reads = {qr, pr, {kv, bytes}};
  for (const SpanMeta& m : plan_.spans) {
    if (!m.cached) continue;
    reads.push_back(m.cache_k);
    reads.push_back(m.cache_v);
    copies_.cached_rows += m.count;
  }
  Run("attention", std::move(reads), {outr},
      [=, spans = plan_.spans, order = plan_.order,
       heads = plan_.heads](dev::OpContext& c) {
        const char* base = c.In<char>(kv, bytes);
        std::vector<kernels::KvSpan> rebased(order.size());
        for (size_t i = 0; i < order.size(); ++i) {
          const SpanMeta& m = spans[order[i]];
          kernels::KvSpan& s = rebased[i];
          s.k = base + m.k_off;
          s.v = base + m.v_off;
          if (m.cached) {
            s.k = c.In<char>(m.cache_k.ptr, m.cache_k.bytes);
            s.v = c.In<char>(m.cache_v.ptr, m.cache_v.bytes);
          }
          if (m.rows_off >= 0) {
            s.rows = reinterpret_cast<const int32_t*>(base + m.rows_off);
          }
          s.dtype = m.dtype;
          s.stride = head_dim;
          s.count = m.count;
          s.first_pos = m.first_pos;
          if (m.pos_off >= 0) {
            s.positions = reinterpret_cast<const int64_t*>(base + m.pos_off);
          }
        }
        std::vector<kernels::KvSpanList> lists;
        for (const auto& [begin, count] : heads) {
          lists.push_back({rebased.data() + begin, count});
        }
        cpu::AttentionArgs a;
        a.q = c.In<float>(qr.ptr, q_elems);
        a.q_pos = c.In<int64_t>(pr.ptr, n_q);
        a.n_q = static_cast<int>(n_q);
        a.n_heads = spec.n_heads;
        a.head_dim = head_dim;
        a.scale = spec.scale;
        a.softcap = spec.softcap;
        a.window = spec.window;
        a.kv = lists.data();
        a.out = c.Out<float>(outr.ptr, q_elems);
        cpu::Attention(nullptr, a);
      });
}

// ---- Logits -----------------------------------------------------------------

void DeviceBackend::Logits(Activation x, absl::Span<const int64_t> rows,
                           absl::Span<const float> norm, float eps,
                           const Matrix& output, float softcap,
                           std::vector<float>* out) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t width = Width(x), vocab = output.rows;
  out->assign(static_cast<size_t>(n * vocab),
              std::numeric_limits<float>::quiet_NaN());
  const int64_t w_bytes =
      output.rows * kernels::RowBytes(output.type, output.cols);
  const DevPtr nd = Resident(norm.data(), FloatBytes(width));
  const DevPtr wd = Resident(output.data, w_bytes);
  if (!GrowDevice(gathered_dev_, FloatBytes(n * width)) ||
      !GrowDevice(logits_dev_, FloatBytes(n * vocab))) {
    return;
  }
  const DevPtr xd = Ptr(x), gd = gathered_dev_.ptr, ld = logits_dev_.ptr;
  const int64_t x_floats = rows_ * width;
  const kernels::DType type = output.type;
  Run("logits", {Rows(x), {nd, FloatBytes(width)}, {wd, w_bytes}},
      {{gd, FloatBytes(n * width)}, {ld, FloatBytes(n * vocab)}},
      [=, picked = std::vector<int64_t>(rows.begin(), rows.end())](
          dev::OpContext& c) {
        const float* xs = c.In<float>(xd, x_floats);
        const float* w = c.In<float>(nd, width);
        float* g = c.Out<float>(gd, n * width);
        for (int64_t j = 0; j < n; ++j) {
          cpu::RmsNorm(nullptr, xs + picked[j] * width, w, 1, width, eps,
                       g + j * width);
        }
        float* l = c.Out<float>(ld, n * vocab);
        cpu::MatMul(nullptr, type, c.In<uint8_t>(wd, w_bytes), width, vocab, g,
                    n, l);
        if (softcap > 0.0f) cpu::SoftCap(nullptr, l, n * vocab, softcap);
      });
  Download(logits_dev_.ptr, FloatBytes(n * vocab), out->data());
}

void DeviceBackend::ReadRows(Activation a, std::vector<float>* out) {
  const Range r = Rows(a);
  out->assign(static_cast<size_t>(r.bytes / 4),
              std::numeric_limits<float>::quiet_NaN());
  if (ok()) Download(r.ptr, r.bytes, out->data());
}

bool DeviceBackend::Download(DevPtr src, int64_t bytes, float* out) {
  if (!GrowStaging(logits_stage_, bytes)) return false;
  if (debug_.host_reads_device_ptr &&
      !Ok(rt_->HostRead(reinterpret_cast<const void*>(src.addr), bytes))) {
    return false;
  }
  if (!Ok(rt_->CopyD2H(logits_stage_.host, src, bytes, stream_))) {
    return false;
  }
  if (!debug_.skip_sync_before_host_read && !Ok(rt_->Synchronize(stream_))) {
    return false;
  }
  if (!Ok(rt_->HostRead(logits_stage_.host, bytes))) return false;
  std::memcpy(out, logits_stage_.host, static_cast<size_t>(bytes));
  return true;
}

// ---- MakeBackend(kFake) ---------------------------------------------------

absl::StatusOr<std::unique_ptr<Backend>> MakeFakeDeviceBackend(
    const BackendOptions& options) {
  dev::FakeConfig c;
  c.device_bytes = options.fake_device_bytes;
  c.schedule = options.fake_schedule;
  c.seed = options.fake_seed;
  c.max_delay_us = options.fake_max_delay_us;
  c.name = "fake";
  auto rt = std::make_unique<dev::FakeRuntime>(c);
  if (!rt->init_status().ok()) return rt->init_status();
  std::string device =
      absl::StrCat("fake device (schedule ", dev::ScheduleName(c.schedule),
                   ", seed ", c.seed, ")");
  auto backend = std::make_unique<DeviceBackend>(
      std::move(rt), "fake", std::move(device), DeviceBackendDebug{},
      ResidencyOptions{options.kv_residency, options.resident_kv_bytes});
  if (!backend->status().ok()) return backend->status();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace ckv
