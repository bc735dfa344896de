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

constexpr int64_t kUploadChunk = int64_t{4} << 20;  // weight upload staging

int64_t FloatBytes(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float));
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
  launchers_ = rt_->launchers();
  arena_ = std::make_shared<PinnedArena>(*rt_, owned_);
  // The resident segment tables may take a quarter of the device.
  DevicePlannerDebug planner_debug = debug_.planner;
  planner_debug.no_block_caches |= debug_.host_copy_mode;
  planner_ = std::make_shared<DevicePlanner>(
      *rt_, owned_,
      debug_.table_bytes > 0 ? debug_.table_bytes
                             : info_.device_memory_bytes / 4,
      planner_debug);
  planner_->EnableRowLists(!debug_.host_row_lists);
  // Copy-mode caches fetch their misses from the pinned segment rows.
  planner_->SetHostRowsMap(
      [arena = arena_](const void* p, int64_t bytes, uint64_t* addr) {
        dev::DevPtr d;
        if (!arena->Mapped(p, bytes, &d)) return false;
        *addr = d.addr;
        return true;
      });
  index_builder_ = std::make_shared<DeviceIndexBuilder>(*rt_, owned_, arena_,
                                                        debug_.index_builder);
  auto st = rt_->CreateStream(dev::kHighestPriority);
  if (Ok(st.status())) stream_ = *st;
  // Streamed attention's copies go on their own stream, ordered by events.
  // The two landing buffers take at most an eighth of the device.
  stream_chunk_bytes_ = std::clamp<int64_t>(
      residency.stream_chunk_bytes, 1,
      std::max<int64_t>(info_.device_memory_bytes / 16, 1 << 20));
  auto copies = rt_->CreateStream(dev::kHighestPriority);
  if (Ok(copies.status())) copy_stream_ = *copies;
  for (dev::Event* e : {&stream_start_, &filled_[0], &filled_[1], &drained_[0],
                        &drained_[1], &queries_ready_}) {
    auto ev = rt_->CreateEvent();
    if (Ok(ev.status())) *e = *ev;
  }
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
       {&pos_dev_, &tok_dev_, &kv_dev_, &gathered_dev_, &logits_dev_,
        &picked_dev_, &attn_ws_dev_, &landing_[0], &landing_[1], &state_dev_}) {
    free_dev(*b);
  }
  for (auto& [key, ptr] : resident_) rt_->Free(ptr).IgnoreError();
  resident_.clear();
  for (auto& [key, g] : graphs_) DropGraph(g);
  graphs_.clear();
  for (Staging* s : {&qkv_stage_, &kv_stage_, &logits_stage_, &upload_stage_,
                     &step_stage_}) {
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

Backend::Residency DeviceBackend::residency() const {
  const CacheRowsStats c = cache_rows_->stats();  // under the arena's lock
  return Residency{c.resident_bytes, c.resident_evictions, c.resident_refusals,
                   streamed_bytes_.load(std::memory_order_relaxed)};
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
  FlushDeferred();  // no other runtime call inside a deferred run
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
  FlushDeferred();  // no other runtime call inside a deferred run
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

bool DeviceBackend::Sync() {
  ++syncs_;
  return Ok(rt_->Synchronize(stream_));
}

bool DeviceBackend::StepUpload(DevPtr dst, const void* src, int64_t bytes) {
  FlushDeferred();  // no other runtime call inside a deferred run
  if (!ok()) return false;
  if (bytes <= 0) return true;
  const int64_t need = AlignUp(bytes);
  if (step_stage_used_ + need > step_stage_.bytes) {
    // This step's earlier copies out of it may still be pending.
    if (step_stage_used_ > 0 && !Sync()) return false;
    if (!GrowStaging(step_stage_, need)) return false;
    step_stage_used_ = 0;
  }
  char* h = step_stage_.host + step_stage_used_;
  if (!Ok(rt_->HostWrite(h, bytes))) return false;
  std::memcpy(h, src, static_cast<size_t>(bytes));
  step_stage_used_ += need;
  return Ok(rt_->CopyH2D(dst, h, bytes, stream_));
}

bool DeviceBackend::Upload(DevPtr dst, const void* src, int64_t bytes,
                           Staging& staging) {
  FlushDeferred();  // no other runtime call inside a deferred run
  const char* from = static_cast<const char*>(src);
  for (int64_t off = 0; off < bytes; off += kUploadChunk) {
    const int64_t n = std::min(kUploadChunk, bytes - off);
    // The staging's previous H2D copy may still be reading it.
    if (!Sync() || !GrowStaging(staging, n)) return false;
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
  FlushDeferred();
  auto d = rt_->Malloc(bytes);
  if (!Ok(d.status())) return DevPtr{};
  resident_[key] = *d;
  resident_bytes_ += bytes;
  if (!Upload(*d, host, bytes, upload_stage_)) return DevPtr{};
  return *d;
}

void DeviceBackend::Run(std::string name, std::vector<Range> reads,
                        std::vector<Range> writes,
                        std::function<void(dev::OpContext&)> body,
                        std::function<absl::Status(void*)> device_launch,
                        Site site) {
  if (!ok()) return;
  dev::Op op;
  op.name = std::move(name);
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  op.body = std::move(body);
  op.device_launch = std::move(device_launch);
  if (in_region_) {  // launched, captured or replayed at EndRegion
    deferred_.push_back({std::move(op), site});
    return;
  }
  Ok(rt_->Launch(std::move(op), stream_, site));
}

// ---- Steps ----------------------------------------------------------------

Activation DeviceBackend::NewActivation(int64_t width) {
  buffers_.push_back(Buffer{width, DevBuf{}});
  return Activation{static_cast<int>(buffers_.size()) - 1};
}

void DeviceBackend::BeginStep(absl::Span<const int64_t> positions) {
  cache_rows_->BeginStep();  // residency: what this step reads is in use
  rows_ = static_cast<int64_t>(positions.size());
  pos_.assign(positions.begin(), positions.end());
  // Capacity grows here, outside any op: contents are undefined anyway.
  for (Buffer& b : buffers_) {
    if (!GrowDevice(b.mem, FloatBytes(rows_ * b.width))) return;
  }
  const int64_t bytes = rows_ * static_cast<int64_t>(sizeof(int64_t));
  if (!GrowDevice(pos_dev_, bytes)) return;
  // A step begun without the last one ending: its copies may be pending.
  if (step_stage_used_ > 0 && !Sync()) return;
  step_stage_used_ = 0;
  StepUpload(pos_dev_.ptr, pos_.data(), bytes);
}

void DeviceBackend::EndStep() {
  FlushDeferred();  // no other runtime call inside a deferred run
  // The next step rewrites the staging buffers from the host.
  if (ok() && Sync()) {
    step_stage_used_ = 0;
    kv_stage_used_ = 0;
  }
  FinishAppends();  // not called (tests driving one op)
  // Nothing reads the step's row lists any more.
  planner_->EndStep();
  streamed_bytes_.store(copies_.streamed_bytes, std::memory_order_relaxed);
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
  DeviceBackendDebug debug;
  debug.bf16_weights = options.fake_bf16_weights;
  debug.host_kmeans = options.host_kmeans;
  debug.no_graphs = !options.device_graphs;
  auto backend = std::make_unique<DeviceBackend>(
      std::move(rt), "fake", std::move(device), debug,
      ResidencyOptions{.mode = options.kv_residency,
                       .budget_bytes = options.resident_kv_bytes,
                       .stream_chunk_bytes = options.kv_stream_chunk_bytes});
  if (!backend->status().ok()) return backend->status();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace ckv
