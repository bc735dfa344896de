#include "kernels/device/fake_runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ckv::kernels::device {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string Hex(const void* p) {
  return absl::StrFormat("0x%x", reinterpret_cast<uint64_t>(p));
}

// An op body's view of its declared ranges.
class FakeOpContext final : public OpContext {
 public:
  FakeOpContext(const Op& op, const std::vector<void*>& views, uint64_t seed)
      : op_(op), views_(views), rng_(seed) {}

  void Phase(int64_t n, const std::function<void(int64_t)>& fn) override {
    std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[rng_() % static_cast<uint64_t>(i + 1)]);
    }
    for (int64_t t : order) fn(t);
  }
  const absl::Status& error() const { return error_; }

 protected:
  // The first declared range (reads, then writes; writes only for a
  // write) that holds [p, p + bytes), through its view. Ops with many
  // ranges (a batch's items) look through an index of them.
  void* Map(DevPtr p, int64_t bytes, bool write) override {
    const size_t n_reads = op_.reads.size();
    const size_t n = n_reads + op_.writes.size();
    const size_t found = bytes < 0        ? n
                         : n > kIndexFrom ? FindIndexed(p.addr, bytes, write)
                                          : FindLinear(p.addr, bytes, write);
    if (found < n) {
      return static_cast<char*>(views_[found]) +
             (p.addr - RangeAt(found).ptr.addr);
    }
    if (error_.ok()) {
      error_ = absl::FailedPreconditionError(
          absl::StrFormat("op %s %s [0x%x, +%d) that it did not declare",
                          op_.name, write ? "writes" : "reads", p.addr, bytes));
    }
    scratch_.emplace_back(static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                          static_cast<char>(kPoisonByte));
    return scratch_.back().data();
  }

 private:
  static constexpr size_t kIndexFrom = 32;  // ranges: index above this
  static constexpr uint64_t kShortBytes = uint64_t{1} << 16;

  const Range& RangeAt(size_t i) const {
    return i < op_.reads.size() ? op_.reads[i]
                                : op_.writes[i - op_.reads.size()];
  }
  bool Holds(size_t i, uint64_t addr, int64_t bytes, bool write) const {
    if (write && i < op_.reads.size()) return false;  // not writable
    const Range& r = RangeAt(i);
    return addr >= r.ptr.addr &&
           addr + static_cast<uint64_t>(bytes) <=
               r.ptr.addr + static_cast<uint64_t>(r.bytes);
  }
  size_t FindLinear(uint64_t addr, int64_t bytes, bool write) const {
    const size_t n = op_.reads.size() + op_.writes.size();
    for (size_t i = 0; i < n; ++i) {
      if (Holds(i, addr, bytes, write)) return i;
    }
    return n;
  }
  // Short ranges sorted by start: one holding [addr, addr + bytes) starts
  // in (addr + bytes - kShortBytes, addr]; long ones are scanned.
  size_t FindIndexed(uint64_t addr, int64_t bytes, bool write) {
    const size_t n = op_.reads.size() + op_.writes.size();
    if (short_.empty() && long_.empty()) {
      for (size_t i = 0; i < n; ++i) {
        const Range& r = RangeAt(i);
        if (static_cast<uint64_t>(r.bytes) <= kShortBytes) {
          short_.push_back({r.ptr.addr, r.bytes, i >= op_.reads.size(), i});
        } else {
          long_.push_back(i);
        }
      }
      // A range declared again (items sharing an input) never wins over
      // its first declaration: only that one is kept.
      std::sort(short_.begin(), short_.end());
      short_.erase(std::unique(short_.begin(), short_.end(),
                               [](const ShortRange& a, const ShortRange& b) {
                                 return a.start == b.start &&
                                        a.bytes == b.bytes &&
                                        a.write == b.write;
                               }),
                   short_.end());
    }
    size_t best = n;
    for (size_t i : long_) {
      if (i < best && Holds(i, addr, bytes, write)) best = i;
    }
    const uint64_t end = addr + static_cast<uint64_t>(bytes);
    const uint64_t from = end > kShortBytes ? end - kShortBytes : 0;
    for (auto it = std::lower_bound(short_.begin(), short_.end(),
                                    ShortRange{from, 0, false, 0});
         it != short_.end() && it->start <= addr; ++it) {
      if (it->index < best && Holds(it->index, addr, bytes, write)) {
        best = it->index;
      }
    }
    return best;
  }

  const Op& op_;
  const std::vector<void*>& views_;
  std::mt19937_64 rng_;
  absl::Status error_;
  std::deque<std::vector<char>> scratch_;
  struct ShortRange {
    uint64_t start;
    int64_t bytes;
    bool write;
    size_t index;  // in declaration order (reads, then writes)
    auto operator<=>(const ShortRange&) const = default;
  };
  std::vector<ShortRange> short_;  // by start, then size, kind and index
  std::vector<size_t> long_;
};

}  // namespace

const char* ScheduleName(Schedule s) {
  switch (s) {
    case Schedule::kInline:
      return "inline";
    case Schedule::kLazy:
      return "lazy";
    case Schedule::kThreaded:
      return "threaded";
  }
  return "?";
}

bool ParseSchedule(const char* name, Schedule* out) {
  for (Schedule s : {Schedule::kInline, Schedule::kLazy, Schedule::kThreaded}) {
    if (std::strcmp(name, ScheduleName(s)) == 0) {
      *out = s;
      return true;
    }
  }
  return false;
}

FakeRuntime::FakeRuntime(FakeConfig config)
    : config_(std::move(config)),
      memory_(config_.device_bytes, config_.quarantine_bytes) {}

FakeRuntime::~FakeRuntime() {
  Lock lock(mu_);
  for (size_t st = 0; st < streams_.size(); ++st) {
    Complete(static_cast<int>(st), streams_[st]->enqueued, lock);
  }
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  for (auto& s : streams_) {
    if (s->worker.joinable()) s->worker.join();
  }
}

DeviceInfo FakeRuntime::Info() const {
  Lock lock(mu_);
  return DeviceInfo{config_.name, memory_.total_bytes(), memory_.free_bytes()};
}

absl::Status FakeRuntime::OrderingStatus() const {
  Lock lock(mu_);
  if (checker_.races().empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(checker_.race_count(), " stream-ordering race(s):\n",
                   absl::StrJoin(checker_.races(), "\n")));
}

int64_t FakeRuntime::race_count() const {
  Lock lock(mu_);
  return checker_.race_count();
}

int64_t FakeRuntime::ops_run() const {
  Lock lock(mu_);
  return ops_run_;
}

absl::Status FakeRuntime::CheckStream(Stream st, Site s) const {
  if (st.id < 0 || st.id >= static_cast<int>(streams_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown stream ", st.id, " at ", SiteString(s)));
  }
  return absl::OkStatus();
}

absl::Status FakeRuntime::CheckEvent(Event e, Site s) const {
  if (e.id < 0 || e.id >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown event ", e.id, " at ", SiteString(s)));
  }
  return absl::OkStatus();
}

absl::Status FakeRuntime::RejectInCapture(const char* call, Site s) {
  absl::Status error;
  for (size_t i = 0; i < streams_.size(); ++i) {
    StreamState& st = *streams_[i];
    // Thread-local capture: only the capturing thread's calls break it.
    if (!st.capturing || st.capture_thread != std::this_thread::get_id()) {
      continue;
    }
    error = absl::FailedPreconditionError(absl::StrCat(
        call, " at ", SiteString(s), " while stream ", i,
        " is being captured: not allowed inside a graph capture (the "
        "capture is invalidated)"));
    if (st.capture_error.ok()) st.capture_error = error;
  }
  return error;
}

absl::Status FakeRuntime::TakeAsyncError() { return async_error_; }

// ---- Memory ------------------------------------------------------------

absl::StatusOr<DevPtr> FakeRuntime::DoMalloc(int64_t bytes, Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("Malloc", s); !c.ok()) return c;
  return memory_.Malloc(bytes, s);
}

// The allocation is made at once; an op on `st` that writes it stands for
// the allocation's place in the stream, so that work on other streams not
// ordered after it is reported by the checker.
absl::StatusOr<DevPtr> FakeRuntime::DoMallocAsync(int64_t bytes, Stream st,
                                                  Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("MallocAsync", s); !c.ok()) return c;
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  auto p = memory_.Malloc(bytes, s, /*async=*/true);
  if (!p.ok()) return p.status();
  auto op = std::make_shared<Op>();
  op->name = "malloc_async";
  op->writes = {{*p, bytes}};
  op->body = [](OpContext&) {};
  if (absl::Status e = Enqueue(std::move(op), st, s, lock); !e.ok()) return e;
  return *p;
}

// An op on `st` that writes the whole allocation (unordered work of other
// streams is reported), after which the memory is freed (quarantined);
// from now on no new work may name it.
absl::Status FakeRuntime::DoFreeAsync(DevPtr p, Stream st, Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("FreeAsync", s); !c.ok()) return c;
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  if (absl::Status c = memory_.CheckAsyncFree(p, s); !c.ok()) return c;
  auto op = std::make_shared<Op>();
  op->name = "free_async";
  op->writes = {{p, memory_.BlockBytes(p)}};
  op->body = [](OpContext&) {};
  absl::Status e = Enqueue(std::move(op), st, s, lock, p);
  if (e.ok()) memory_.MarkFreeing(p, s);
  return e;
}

void FakeRuntime::FinishItem(const Work& w) {
  if (w.free_after.null()) return;
  const int64_t bytes = memory_.BlockBytes(w.free_after);
  absl::Status freed = memory_.Free(w.free_after, w.site, /*async=*/true);
  if (freed.ok()) {
    checker_.Forget(w.free_after.addr, bytes);
  } else if (async_error_.ok()) {
    async_error_ = freed;
  }
}

absl::Status FakeRuntime::DoFree(DevPtr p, Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("Free", s); !c.ok()) return c;
  // As cudaFree: waits for all work, so nothing in flight sees the free.
  for (size_t st = 0; st < streams_.size(); ++st) {
    Complete(static_cast<int>(st), streams_[st]->enqueued, lock);
  }
  checker_.HostJoinAll();
  const int64_t bytes = memory_.BlockBytes(p);
  absl::Status freed = memory_.Free(p, s);
  if (freed.ok()) checker_.Forget(p.addr, bytes);
  return freed;
}

absl::StatusOr<void*> FakeRuntime::DoHostAllocPinned(int64_t bytes, Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("HostAllocPinned", s); !c.ok()) {
    return c;
  }
  return memory_.HostAllocPinned(bytes, s);
}

absl::Status FakeRuntime::DoHostFree(void* p, Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("HostFree", s); !c.ok()) return c;
  for (size_t st = 0; st < streams_.size(); ++st) {
    Complete(static_cast<int>(st), streams_[st]->enqueued, lock);
  }
  checker_.HostJoinAll();
  return memory_.HostFree(p, s);
}

absl::StatusOr<DevPtr> FakeRuntime::DoMappedPointer(const void* p, Site s) {
  Lock lock(mu_);
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  if (!memory_.IsPinned(a, 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MappedPointer at ", SiteString(s), ": ", Hex(p),
                     " is not a mapped-pinned buffer (HostAllocPinned)"));
  }
  return DevPtr{a};
}

absl::Status FakeRuntime::DoHostAccess(const void* p, int64_t bytes, bool write,
                                       Site s) {
  Lock lock(mu_);
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  const char* what = write ? "host write" : "host read";
  if (memory_.InDeviceSpace(a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of device address ", Hex(p), " at ", SiteString(s),
        " (allocated at ", memory_.AllocationSite(a),
        "): device memory is not host-accessible; CopyD2H it into pinned "
        "memory and synchronise first"));
  }
  absl::Status in_range = memory_.CheckRange({DevPtr{a}, bytes}, what, s);
  if (in_range.ok()) {
    checker_.Access(OrderingChecker::kHost, a, bytes, write, what, s);
    return absl::OkStatus();
  }
  // Pageable memory is the host's own business; a freed pinned buffer is
  // a use after free.
  if (absl::IsFailedPrecondition(in_range) || absl::IsOutOfRange(in_range)) {
    return in_range;
  }
  return absl::OkStatus();
}

// ---- Streams and events -------------------------------------------------

absl::StatusOr<Stream> FakeRuntime::DoCreateStream(int priority, Site s) {
  if (priority > kLowestPriority || priority < kHighestPriority) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stream priority ", priority, " at ", SiteString(s), " is outside [",
        kHighestPriority, ", ", kLowestPriority, "]"));
  }
  Lock lock(mu_);
  const int id = static_cast<int>(streams_.size());
  auto st = std::make_unique<StreamState>();
  st->priority = priority;
  st->agent = checker_.AddAgent();
  st->rng.seed(SplitMix64(config_.seed ^ (0x5151ull * (id + 1))));
  StreamState* raw = st.get();
  streams_.push_back(std::move(st));
  if (config_.schedule == Schedule::kThreaded) {
    raw->worker = std::thread([this, id] { WorkerLoop(id); });
  }
  return Stream{id};
}

absl::StatusOr<Event> FakeRuntime::DoCreateEvent(Site) {
  Lock lock(mu_);
  events_.push_back(EventState{checker_.AddEvent(), -1, 0});
  return Event{static_cast<int>(events_.size()) - 1};
}

absl::Status FakeRuntime::CheckEventCall(const char* call, Stream st, Event e,
                                         Site s) {
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  if (absl::Status c = CheckEvent(e, s); !c.ok()) return c;
  StreamState& ss = *streams_[st.id];
  if (!ss.capturing) return absl::OkStatus();
  ss.capture_error = absl::UnimplementedError(
      absl::StrCat(call, " at ", SiteString(s),
                   " inside a capture: the fake captures one stream only"));
  return ss.capture_error;
}

absl::Status FakeRuntime::DoRecord(Event e, Stream st, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckEventCall("Record", st, e, s); !c.ok()) return c;
  StreamState& ss = *streams_[st.id];
  checker_.Record(events_[e.id].checker_id, ss.agent);
  events_[e.id].stream = st.id;
  events_[e.id].seq = ss.enqueued;
  return absl::OkStatus();
}

absl::Status FakeRuntime::DoWait(Stream st, Event e, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckEventCall("Wait", st, e, s); !c.ok()) return c;
  StreamState& ss = *streams_[st.id];
  const EventState& ev = events_[e.id];
  checker_.Wait(ss.agent, ev.checker_id);
  if (ev.stream < 0 || ev.stream == st.id) return absl::OkStatus();
  Work w;
  w.site = s;
  w.wait_stream = ev.stream;
  w.wait_seq = ev.seq;
  ss.queue.push_back(std::move(w));
  const int64_t seq = ++ss.enqueued;
  if (config_.schedule == Schedule::kInline) RunUntil(st.id, seq, lock);
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeRuntime::DoQuery(Event e, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckEvent(e, s); !c.ok()) return c;
  if (absl::Status c = RejectInCapture("Query", s); !c.ok()) return c;
  const EventState& ev = events_[e.id];
  if (ev.stream < 0) return true;
  // Lazy: a query forces the work (a host polling loop must end).
  if (config_.schedule != Schedule::kThreaded) {
    RunUntil(ev.stream, ev.seq, lock);
  }
  if (streams_[ev.stream]->done < ev.seq) return false;
  checker_.HostJoinEvent(ev.checker_id);
  return true;
}

absl::Status FakeRuntime::DoSyncEvent(Event e, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckEvent(e, s); !c.ok()) return c;
  if (absl::Status c = RejectInCapture("Synchronize(event)", s); !c.ok()) {
    return c;
  }
  const EventState& ev = events_[e.id];
  if (ev.stream >= 0) Complete(ev.stream, ev.seq, lock);
  checker_.HostJoinEvent(ev.checker_id);
  return TakeAsyncError();
}

absl::Status FakeRuntime::DoSyncStream(Stream st, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  if (absl::Status c = RejectInCapture("Synchronize(stream)", s); !c.ok()) {
    return c;
  }
  Complete(st.id, streams_[st.id]->enqueued, lock);
  checker_.HostJoinAgent(streams_[st.id]->agent);
  return TakeAsyncError();
}

absl::Status FakeRuntime::DoSyncDevice(Site s) {
  Lock lock(mu_);
  if (absl::Status c = RejectInCapture("SynchronizeDevice", s); !c.ok()) {
    return c;
  }
  for (size_t st = 0; st < streams_.size(); ++st) {
    Complete(static_cast<int>(st), streams_[st]->enqueued, lock);
  }
  checker_.HostJoinAll();
  return TakeAsyncError();
}

// ---- Copies and launches ------------------------------------------------

absl::Status FakeRuntime::CheckHostSide(const void* p, int64_t bytes,
                                        const char* call, Site s) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  if (memory_.InDeviceSpace(a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, " at ", SiteString(s), ": host pointer ", Hex(p),
        " is a device address (allocated at ", memory_.AllocationSite(a),
        "); the host cannot read or write device memory"));
  }
  if (memory_.IsPinned(a, bytes)) return absl::OkStatus();
  absl::Status r = memory_.CheckRange({DevPtr{a}, bytes}, call, s);
  if (absl::IsFailedPrecondition(r) || absl::IsOutOfRange(r)) return r;
  return absl::InvalidArgumentError(
      absl::StrCat(call, " at ", SiteString(s), ": host memory ", Hex(p),
                   " is pageable; async copies need HostAllocPinned memory"));
}

absl::Status FakeRuntime::CheckCopyHost(const void* p, int64_t bytes,
                                        const char* call, Site s) {
  Lock lock(mu_);
  absl::Status c = CheckHostSide(p, bytes, call, s);
  if (!c.ok()) {
    RejectInCapture(absl::StrCat("a failed ", call).c_str(), s).IgnoreError();
  }
  return c;
}

absl::Status FakeRuntime::EnqueueCopy(const char* name, DevPtr dst, DevPtr src,
                                      int64_t bytes, Stream st, Site s) {
  auto op = std::make_shared<Op>();
  op->name = name;
  op->reads = {{src, bytes}};
  op->writes = {{dst, bytes}};
  op->body = [dst, src, bytes](OpContext& ctx) {
    std::memcpy(ctx.Out<char>(dst, bytes), ctx.In<char>(src, bytes),
                static_cast<size_t>(bytes));
  };
  Lock lock(mu_);
  return Enqueue(std::move(op), st, s, lock);
}

absl::Status FakeRuntime::DoCopyH2D(DevPtr dst, const void* src, int64_t bytes,
                                    Stream st, Site s) {
  if (absl::Status c = CheckCopyHost(src, bytes, "CopyH2D", s); !c.ok()) {
    return c;
  }
  return EnqueueCopy("copy_h2d", dst, DevPtr{reinterpret_cast<uint64_t>(src)},
                     bytes, st, s);
}

absl::Status FakeRuntime::DoCopyD2H(void* dst, DevPtr src, int64_t bytes,
                                    Stream st, Site s) {
  if (absl::Status c = CheckCopyHost(dst, bytes, "CopyD2H", s); !c.ok()) {
    return c;
  }
  return EnqueueCopy("copy_d2h", DevPtr{reinterpret_cast<uint64_t>(dst)}, src,
                     bytes, st, s);
}

absl::Status FakeRuntime::DoCopyD2D(DevPtr dst, DevPtr src, int64_t bytes,
                                    Stream st, Site s) {
  return EnqueueCopy("copy_d2d", dst, src, bytes, st, s);
}

absl::Status FakeRuntime::DoMemset(DevPtr dst, uint8_t value, int64_t bytes,
                                   Stream st, Site s) {
  auto op = std::make_shared<Op>();
  op->name = "memset";
  op->writes = {{dst, bytes}};
  op->body = [dst, value, bytes](OpContext& ctx) {
    std::memset(ctx.Out<char>(dst, bytes), value, static_cast<size_t>(bytes));
  };
  Lock lock(mu_);
  return Enqueue(std::move(op), st, s, lock);
}

absl::Status FakeRuntime::DoLaunch(Op op, Stream st, Site s) {
  if (!op.body) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op ", op.name, " launched at ", SiteString(s), " has no body"));
  }
  Lock lock(mu_);
  return Enqueue(std::make_shared<Op>(std::move(op)), st, s, lock);
}

absl::Status FakeRuntime::Enqueue(std::shared_ptr<Op> op, Stream st, Site s,
                                  Lock& lock, DevPtr free_after) {
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  StreamState& ss = *streams_[st.id];
  std::vector<void*> views;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Range& r : pass == 0 ? op->reads : op->writes) {
      const std::string what =
          absl::StrCat(pass == 0 ? "read by " : "write by ", op->name);
      if (absl::Status c = memory_.CheckRange(r, what, s); !c.ok()) {
        if (ss.capturing && ss.capture_error.ok()) ss.capture_error = c;
        return c;
      }
      views.push_back(memory_.HostView(r.ptr));
    }
  }
  if (ss.capturing) {
    ss.captured.emplace_back(std::move(op), s);
    return absl::OkStatus();
  }
  checker_.Issue(ss.agent);
  for (int pass = 0; pass < 2; ++pass) {
    for (const Range& r : pass == 0 ? op->reads : op->writes) {
      checker_.Access(ss.agent, r.ptr.addr, r.bytes, pass == 1, op->name, s);
    }
  }
  Work w;
  w.op = std::move(op);
  w.views = std::move(views);
  w.order_seed = SplitMix64(config_.seed + ++op_counter_);
  w.site = s;
  w.free_after = free_after;
  ss.queue.push_back(std::move(w));
  const int64_t seq = ++ss.enqueued;
  if (config_.schedule == Schedule::kInline) RunUntil(st.id, seq, lock);
  cv_.notify_all();
  return absl::OkStatus();
}

// ---- Graph capture -------------------------------------------------------

absl::Status FakeRuntime::DoBeginCapture(Stream st, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  for (const auto& other : streams_) {
    if (other->capturing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "BeginCapture at ", SiteString(s), ": a capture is under way"));
    }
  }
  StreamState& ss = *streams_[st.id];
  ss.capturing = true;
  ss.capture_thread = std::this_thread::get_id();
  ss.capture_error = absl::OkStatus();
  ss.captured.clear();
  return absl::OkStatus();
}

absl::StatusOr<Graph> FakeRuntime::DoEndCapture(Stream st, Site s) {
  Lock lock(mu_);
  if (absl::Status c = CheckStream(st, s); !c.ok()) return c;
  StreamState& ss = *streams_[st.id];
  if (!ss.capturing) {
    return absl::FailedPreconditionError(
        absl::StrCat("EndCapture at ", SiteString(s), ": stream ", st.id,
                     " is not capturing"));
  }
  ss.capturing = false;
  if (!ss.capture_error.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("capture invalidated: ", ss.capture_error.message()));
  }
  graphs_.push_back(GraphState{std::move(ss.captured)});
  ss.captured.clear();
  return Graph{static_cast<int>(graphs_.size()) - 1};
}

absl::Status FakeRuntime::DoReplay(Graph g, Stream st, Site s) {
  Lock lock(mu_);
  if (g.id < 0 || g.id >= static_cast<int>(graphs_.size()) ||
      graphs_[g.id].destroyed) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown graph ", g.id, " at ", SiteString(s)));
  }
  if (absl::Status c = RejectInCapture("Replay", s); !c.ok()) return c;
  for (const auto& [op, site] : graphs_[g.id].ops) {
    if (absl::Status c = Enqueue(op, st, site, lock); !c.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "replay of graph ", g.id, " at ", SiteString(s), ": ", c.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status FakeRuntime::DoDestroyGraph(Graph g, Site s) {
  Lock lock(mu_);
  if (g.id < 0 || g.id >= static_cast<int>(graphs_.size()) ||
      graphs_[g.id].destroyed) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown graph ", g.id, " at ", SiteString(s)));
  }
  graphs_[g.id].ops.clear();
  graphs_[g.id].destroyed = true;
  return absl::OkStatus();
}

// ---- Execution -------------------------------------------------------------

absl::Status FakeRuntime::RunItem(const Work& w) {
  FakeOpContext ctx(*w.op, w.views, w.order_seed);
  w.op->body(ctx);
  if (ctx.error().ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      ctx.error().message(), " (launched at ", SiteString(w.site), ")"));
}

void FakeRuntime::RunUntil(int st, int64_t seq, Lock& lock) {
  StreamState& ss = *streams_[st];
  while (ss.done < seq) {
    Work w = std::move(ss.queue.front());
    ss.queue.pop_front();
    if (w.wait_stream >= 0) RunUntil(w.wait_stream, w.wait_seq, lock);
    if (w.op) {
      absl::Status e = RunItem(w);
      if (!e.ok() && async_error_.ok()) async_error_ = e;
      ++ops_run_;
    }
    FinishItem(w);
    ++ss.done;
  }
}

void FakeRuntime::Complete(int st, int64_t seq, Lock& lock) {
  if (config_.schedule != Schedule::kThreaded) {
    RunUntil(st, seq, lock);
    return;
  }
  StreamState& ss = *streams_[st];
  cv_.wait(lock, [&] { return ss.done >= seq; });
}

void FakeRuntime::WorkerLoop(int st) {
  Lock lock(mu_);
  StreamState& ss = *streams_[st];
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !ss.queue.empty(); });
    if (ss.queue.empty()) return;
    Work w = std::move(ss.queue.front());
    ss.queue.pop_front();
    if (w.wait_stream >= 0) {
      StreamState& other = *streams_[w.wait_stream];
      cv_.wait(lock, [&] { return other.done >= w.wait_seq; });
    }
    const int delay =
        config_.max_delay_us <= 0
            ? 0
            : static_cast<int>(ss.rng() %
                               static_cast<uint64_t>(config_.max_delay_us + 1));
    absl::Status e;
    if (w.op) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(delay));
      {
        // One body at a time: streams interleave in a random order, but a
        // program with a missing wait stays a wrong answer, not a C++
        // data race inside the fake.
        std::lock_guard<std::mutex> body(body_mu_);
        e = RunItem(w);
      }
      lock.lock();
      ++ops_run_;
    }
    if (!e.ok() && async_error_.ok()) async_error_ = e;
    FinishItem(w);
    ++ss.done;
    cv_.notify_all();
  }
}

}  // namespace ckv::kernels::device
