#include "model/backend/device/device_cache_rows.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/device/op_launchers.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

constexpr int64_t kMinStaging = int64_t{1} << 20;

int64_t RoundUp64(int64_t n) { return (n + 63) / 64 * 64; }

}  // namespace

// One cache's rows: [capacity] K rows, then [capacity] V rows, in one
// device allocation. Every method runs under the arena's lock.
class DeviceCacheRows final : public CacheRows {
 public:
  // `budgeted` bytes of the arena's resident budget are this one's (a
  // resident segment's rows), returned when it goes.
  DeviceCacheRows(std::shared_ptr<DeviceCacheArena> arena, int head_dim,
                  int64_t budgeted = 0)
      : arena_(std::move(arena)),
        row_bytes_(int64_t{2} * head_dim),
        budgeted_(budgeted) {}

  ~DeviceCacheRows() override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    arena_->stats_.resident_bytes -= budgeted_;
    if (budgeted_ > 0) arena_->lru_.erase({last_used_, this});
    DropMirrorsLocked();
    if (capacity_ == 0) return;
    arena_->FlushLocked();  // staged writes into these rows land first
    arena_->UnregisterLocked(k(), v());
    arena_->FreeRowsLocked(base_);
  }

  void Reserve(int64_t rows, int64_t keep) override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    if (rows <= capacity_ || failed_) return;
    auto grown =
        arena_->rt_.MallocAsync(2 * rows * row_bytes_, arena_->stream_);
    if (!arena_->OkLocked(grown.status())) {
      failed_ = true;
      return;
    }
    const DevPtr k2 = *grown, v2 = *grown + rows * row_bytes_;
    const int64_t kept = keep * row_bytes_;
    if (!arena_->FlushLocked()) failed_ = true;
    if (kept > 0 && (!arena_->OkLocked(
                         arena_->rt_.CopyD2D(k2, k(), kept, arena_->stream_)) ||
                     !arena_->OkLocked(arena_->rt_.CopyD2D(v2, v(), kept,
                                                           arena_->stream_)))) {
      failed_ = true;
    }
    arena_->stats_.move_bytes += 2 * kept;
    if (capacity_ > 0) {
      arena_->UnregisterLocked(k(), v());
      arena_->FreeRowsLocked(base_);
    }
    base_ = *grown;
    capacity_ = rows;
    arena_->RegisterLocked(k(), v(), capacity_ * row_bytes_);
  }

  void Write(int64_t at, const uint16_t* k_rows, const uint16_t* v_rows,
             int64_t n) override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    if (failed_ || at + n > capacity_ || n <= 0) return;
    const int64_t bytes = n * row_bytes_, off = at * row_bytes_;
    if (!arena_->UploadLocked(k() + off, k_rows, bytes) ||
        !arena_->UploadLocked(v() + off, v_rows, bytes)) {
      failed_ = true;
      return;
    }
    // A resident segment's rows (written whole, once, final): copies of
    // those host rows read the device copy instead (block-cache misses).
    if (budgeted_ > 0 && at == 0 && mirrored_.empty()) {
      mirrored_ = {k_rows, v_rows};
      arena_->mirrors_[reinterpret_cast<uintptr_t>(k_rows)] = {k(), bytes};
      arena_->mirrors_[reinterpret_cast<uintptr_t>(v_rows)] = {v(), bytes};
    }
  }

  // In chunks of (from - to) rows, so no copy overlaps itself.
  void MoveDown(int64_t to, int64_t from, int64_t n) override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    if (failed_ || from + n > capacity_ || to >= from) return;
    if (!arena_->FlushLocked()) {
      failed_ = true;
      return;
    }
    for (int64_t done = 0; done < n;) {
      const int64_t c = std::min(from - to, n - done);
      const int64_t dst = (to + done) * row_bytes_;
      const int64_t src = (from + done) * row_bytes_;
      for (const DevPtr base : {k(), v()}) {
        if (!arena_->OkLocked(arena_->rt_.CopyD2D(
                base + dst, base + src, c * row_bytes_, arena_->stream_))) {
          failed_ = true;
          return;
        }
      }
      arena_->stats_.move_bytes += 2 * c * row_bytes_;
      done += c;
    }
  }

  // Resident rows: moved to the current step's end of the LRU order.
  bool Use() override {
    std::lock_guard<std::mutex> lock(arena_->mu_);
    if (evicted_) return false;
    if (budgeted_ > 0 && last_used_ != arena_->tick_) {
      arena_->lru_.erase({last_used_, this});
      last_used_ = arena_->tick_;
      arena_->lru_.insert({last_used_, this});
    }
    return true;
  }

  // Under the arena's lock, already out of its LRU order: the device
  // memory goes (after the work enqueued before; none has read it for
  // idle_steps steps), and the owner sees Use() false.
  void EvictLocked() {
    DropMirrorsLocked();
    arena_->FlushLocked();  // staged writes into these rows land first
    if (capacity_ > 0) {
      arena_->UnregisterLocked(k(), v());
      arena_->FreeRowsLocked(base_);
    }
    arena_->stats_.resident_bytes -= budgeted_;
    arena_->stats_.evicted_bytes += budgeted_;
    ++arena_->stats_.resident_evictions;
    budgeted_ = 0;
    capacity_ = 0;
    base_ = DevPtr{};
    evicted_ = failed_ = true;
  }

  void set_last_used(int64_t tick) { last_used_ = tick; }
  int64_t budgeted() const { return budgeted_; }

  int64_t capacity() const override { return capacity_; }
  // Device addresses: only the device backend's attention reads them.
  const uint16_t* keys() const override { return AsHost(k()); }
  const uint16_t* values() const override { return AsHost(v()); }

 private:
  using DevPtr = dev::DevPtr;
  DevPtr k() const { return base_; }
  DevPtr v() const { return base_ + capacity_ * row_bytes_; }
  static const uint16_t* AsHost(DevPtr p) {
    return reinterpret_cast<const uint16_t*>(static_cast<uintptr_t>(p.addr));
  }
  void DropMirrorsLocked() {
    for (const uint16_t* host : mirrored_) {
      arena_->mirrors_.erase(reinterpret_cast<uintptr_t>(host));
    }
    mirrored_.clear();
  }

  std::shared_ptr<DeviceCacheArena> arena_;
  int64_t row_bytes_;
  int64_t budgeted_;
  int64_t last_used_ = 0;  // the arena's tick when last used (resident)
  DevPtr base_;
  int64_t capacity_ = 0;
  bool failed_ = false;
  bool evicted_ = false;
  std::vector<const uint16_t*> mirrored_;  // host K, V rows it mirrors
};

DeviceCacheArena::DeviceCacheArena(dev::Runtime& runtime,
                                   std::shared_ptr<void> keep_alive,
                                   dev::Stream stream,
                                   std::shared_ptr<PinnedArena> pinned,
                                   ResidencyOptions residency)
    : rt_(runtime),
      keep_alive_(std::move(keep_alive)),
      stream_(stream),
      pinned_(std::move(pinned)),
      residency_(residency) {}

DeviceCacheArena::~DeviceCacheArena() { Release(rt_, &staging_); }

std::unique_ptr<CacheRows> DeviceCacheArena::NewRows(int head_dim) {
  return std::make_unique<DeviceCacheRows>(shared_from_this(), head_dim);
}

std::unique_ptr<CacheRows> DeviceCacheArena::NewResidentRows(
    int head_dim, int64_t rows, bool asked_before) {
  const int64_t bytes = 2 * rows * int64_t{2} * head_dim;
  std::lock_guard<std::mutex> lock(mu_);
  if (residency_.mode == KvResidency::kOffload) return nullptr;
  const bool fits = status_.ok() && (residency_.mode == KvResidency::kDevice ||
                                     MakeRoomLocked(bytes));
  if (!fits) {
    if (!asked_before) ++stats_.resident_refusals;
    return nullptr;
  }
  stats_.resident_bytes += bytes;
  auto made =
      std::make_unique<DeviceCacheRows>(shared_from_this(), head_dim, bytes);
  made->set_last_used(tick_);
  lru_.insert({tick_, made.get()});
  return made;
}

void DeviceCacheArena::BeginStep() {
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
}

bool DeviceCacheArena::MakeRoomLocked(int64_t bytes) {
  const int64_t need = stats_.resident_bytes + bytes - residency_.budget_bytes;
  if (need <= 0) return true;
  int64_t freeable = 0;
  auto end = lru_.begin();
  for (; end != lru_.end() && freeable < need; ++end) {
    // Used lately; never rows of the current step, which a batched
    // attention of this layer may still be about to read.
    if (end->first + std::max<int64_t>(residency_.idle_steps, 1) > tick_) {
      break;
    }
    freeable += end->second->budgeted();
  }
  if (freeable < need) return false;
  while (lru_.begin() != end) {
    DeviceCacheRows* r = lru_.begin()->second;
    lru_.erase(lru_.begin());
    r->EvictLocked();
  }
  return true;
}

bool DeviceCacheArena::Find(const void* p, dev::Range* rows) const {
  const uint64_t addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return false;
  --it;
  const int64_t end = static_cast<int64_t>(it->first) + it->second;
  if (static_cast<int64_t>(addr) >= end) return false;
  *rows = dev::Range{DevPtr{addr}, end - static_cast<int64_t>(addr)};
  return true;
}

void DeviceCacheArena::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  FlushLocked();
}

absl::Status DeviceCacheArena::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

CacheRowsStats DeviceCacheArena::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool DeviceCacheArena::OkLocked(const absl::Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
  return s.ok();
}

void DeviceCacheArena::RegisterLocked(DevPtr k, DevPtr v, int64_t bytes) {
  regions_[k.addr] = bytes;
  regions_[v.addr] = bytes;
}

void DeviceCacheArena::UnregisterLocked(DevPtr k, DevPtr v) {
  regions_.erase(k.addr);
  regions_.erase(v.addr);
}

// Every fill is a pending write of the next flush, which copies them all
// in one op: rows of a resident segment from its device copy, pinned
// segment rows from their mapped address, other host rows packed into
// the staging buffer first. The staging is reused from its start once
// full, after a flush and a synchronisation (its earlier flushes must have
// read it).
bool DeviceCacheArena::UploadLocked(DevPtr dst, const void* src,
                                    int64_t bytes) {
  DevPtr from;
  if (FindMirrorLocked(src, bytes, &from)) {
    stats_.mirror_bytes += bytes;
    if (!ReserveLocked(0)) return false;
    pending_.push_back({dst, from, bytes});
    return true;
  }
  stats_.fill_bytes += bytes;
  if (pinned_ != nullptr && pinned_->Mapped(src, bytes, &from)) {
    if (!ReserveLocked(0)) return false;
    pending_.push_back({dst, from, bytes});
    return true;
  }
  if (!ReserveLocked(RoundUp64(bytes))) return false;
  char* host = staging_.host + staging_used_;
  if (!OkLocked(rt_.HostWrite(host, bytes))) return false;
  std::memcpy(host, src, static_cast<size_t>(bytes));
  pending_.push_back({dst, staging_dev_ + staging_used_, bytes});
  staging_used_ += RoundUp64(bytes);
  stats_.staged_bytes += bytes;
  return true;
}

bool DeviceCacheArena::ReserveLocked(int64_t row_bytes) {
  const int64_t table =
      static_cast<int64_t>((pending_.size() + 1) * sizeof(dev::ScatterItem));
  if (staging_used_ + row_bytes + table <= staging_.bytes) return true;
  const int64_t want = std::max(2 * (row_bytes + table + 64), kMinStaging);
  if (!FlushLocked() || !OkLocked(rt_.Synchronize(stream_)) ||
      !OkLocked(Grow(rt_, want, &staging_))) {
    return false;
  }
  auto mapped = rt_.MappedPointer(staging_.host);
  if (!OkLocked(mapped.status())) return false;
  staging_dev_ = *mapped;
  staging_used_ = 0;
  return true;
}

// Stream-ordered: the rows go once the work enqueued on the arena's
// stream before (the only stream that reads them) has run; no device-wide
// wait, as a synchronous free would be (cudaFree).
void DeviceCacheArena::FreeRowsLocked(DevPtr base) {
  OkLocked(rt_.FreeAsync(base, stream_));
  ++stats_.rows_freed;
}

bool DeviceCacheArena::FindMirrorLocked(const void* src, int64_t bytes,
                                        DevPtr* dev) const {
  const auto p = reinterpret_cast<uintptr_t>(src);
  auto it = mirrors_.upper_bound(p);
  if (it == mirrors_.begin()) return false;
  --it;
  const uintptr_t off = p - it->first;
  if (off + static_cast<uint64_t>(bytes) >
      static_cast<uint64_t>(it->second.bytes)) {
    return false;
  }
  *dev = it->second.dev + static_cast<int64_t>(off);
  return true;
}

// One op reads the staged bytes and their item table (written after them)
// through the staging's mapped view and writes each row to its place (the
// scatter kernel of the runtime's launchers on a GPU).
bool DeviceCacheArena::FlushLocked() {
  if (pending_.empty() || !status_.ok()) {
    pending_.clear();
    return status_.ok();
  }
  const int64_t n = static_cast<int64_t>(pending_.size());
  const int64_t table = n * static_cast<int64_t>(sizeof(dev::ScatterItem));
  auto* items =
      reinterpret_cast<dev::ScatterItem*>(staging_.host + staging_used_);
  if (!OkLocked(rt_.HostWrite(items, table))) return false;
  dev::ScatterRowsArgs a;  // src null: each item's `from` is its address
  a.items = staging_dev_ + staging_used_;
  a.n = n;
  staging_used_ += RoundUp64(table);
  dev::Op op;
  op.name = "scatter_rows";
  op.reads = {{a.items, table}};
  for (int64_t i = 0; i < n; ++i) {
    const Pending& p = pending_[static_cast<size_t>(i)];
    items[i] = dev::ScatterItem{p.dst.addr, static_cast<int64_t>(p.src.addr),
                                p.bytes, 0};
    op.reads.push_back({p.src, p.bytes});
    op.writes.push_back({p.dst, p.bytes});
  }
  op.body = [a](dev::OpContext& c) {
    const dev::ScatterItem* it = c.In<dev::ScatterItem>(a.items, a.n);
    for (int64_t i = 0; i < a.n; ++i) {
      const dev::DevPtr from{static_cast<uint64_t>(it[i].from)};
      std::memcpy(c.Out<char>(dev::DevPtr{it[i].dst}, it[i].bytes),
                  c.In<char>(from, it[i].bytes),
                  static_cast<size_t>(it[i].bytes));
    }
  };
  if (const dev::OpLaunchers* l = rt_.launchers(); l != nullptr) {
    op.device_launch = [l, a](void* stream) {
      return l->ScatterRows(a, stream);
    };
  }
  pending_.clear();
  ++stats_.scatters;
  return OkLocked(rt_.Launch(std::move(op), stream_));
}

}  // namespace ckv
