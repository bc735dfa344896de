// The device runtime: the small interface the device backend drives
// (docs/device-runtime.md). Framework free: no CUDA header. Two
// implementations: FakeRuntime (fake_runtime.h, CPU, tests) and, later,
// CudaRuntime (kernels/cuda, issue 29).
//
// Addresses: device memory is named by DevPtr, an opaque 64-bit address the
// host must never dereference (on the fake it lies in an inaccessible
// mapping). Mapped-pinned host memory has a host pointer (host code may use
// it, annotated with HostRead/HostWrite) and the same value as a DevPtr
// (unified addressing), which ops may read and write.
//
// Every call returns absl::Status: nothing aborts. Calls that enqueue work
// are asynchronous; a failure inside enqueued work (an op touching memory it
// did not declare) is sticky and returned by the next synchronisation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ckv::kernels::device {

// A call site, for error messages and race reports.
struct Site {
  const char* file = "?";
  int line = 0;
  static constexpr Site Here(const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    return Site{file, line};
  }
};
std::string SiteString(const Site& site);

// A device address (or the device view of a mapped-pinned host address).
struct DevPtr {
  uint64_t addr = 0;
  bool null() const { return addr == 0; }
  DevPtr operator+(int64_t bytes) const {
    return DevPtr{addr + static_cast<uint64_t>(bytes)};
  }
  friend bool operator==(DevPtr a, DevPtr b) { return a.addr == b.addr; }
};

// Handles (ids owned by the runtime that made them).
struct Stream {
  int id = -1;
};
struct Event {
  int id = -1;
};
struct Graph {
  int id = -1;
};

// A byte range an op reads or writes: device memory or mapped-pinned.
struct Range {
  DevPtr ptr;
  int64_t bytes = 0;
};

class OpContext;

// A typed op launch: the op declares every byte range it reads and writes;
// its body may touch only those (OpContext checks it). The body is the
// op's host form (what the fake runs); a CUDA runtime runs `device_launch`
// instead (issue 29), with the same declared ranges.
struct Op {
  std::string name;
  std::vector<Range> reads;
  std::vector<Range> writes;
  std::function<void(OpContext&)> body;
  // Opaque launcher for a real device: given the native stream handle.
  std::function<absl::Status(void* native_stream)> device_launch;
};

// What an op body sees: its declared ranges as host-usable pointers of the
// runtime's worker mapping, and the thread order of its phases.
class OpContext {
 public:
  virtual ~OpContext() = default;
  // Elements [0, count) of T at p, declared as read (In) or written (Out);
  // an undeclared or invalid range records the op's error and returns
  // poisoned scratch memory of the same size.
  template <class T>
  const T* In(DevPtr p, int64_t count) {
    return static_cast<const T*>(Map(p, count * sizeof(T), false));
  }
  template <class T>
  T* Out(DevPtr p, int64_t count) {
    return static_cast<T*>(Map(p, count * sizeof(T), true));
  }
  // Runs fn(t) for t in [0, n) as one phase of `n` device threads; the
  // fake runs them in a seeded random order (phases of one op are
  // separated by barriers: call Phase again for the next).
  virtual void Phase(int64_t n, const std::function<void(int64_t)>& fn) = 0;

 protected:
  virtual void* Map(DevPtr p, int64_t bytes, bool write) = 0;
};

struct DeviceInfo {
  std::string name;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

// Stream priorities follow CUDA: a smaller number is a higher priority.
inline constexpr int kLowestPriority = 0;
inline constexpr int kHighestPriority = -5;

class OpLaunchers;  // kernels/device/op_launchers.h

// Public calls are non-virtual (they take the caller's Site by default
// argument) and forward to the protected virtual Do* forms.
class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual DeviceInfo Info() const = 0;
  // The device's kernels for the device backend's forward ops, or null: a
  // runtime without them (the fake) runs each op's host form.
  virtual const OpLaunchers* launchers() const { return nullptr; }

  // Memory. Device allocations past the device size: RESOURCE_EXHAUSTED.
  // Free waits for all work (as cudaFree does). None may run while a stream
  // is being captured.
  absl::StatusOr<DevPtr> Malloc(int64_t bytes, Site s = Site::Here()) {
    return DoMalloc(bytes, s);
  }
  absl::Status Free(DevPtr p, Site s = Site::Here()) { return DoFree(p, s); }
  // Stream-ordered allocation (cudaMallocAsync / cudaFreeAsync): memory
  // usable by work enqueued after it on `st` (other streams: ordered after
  // it by an event), freed by FreeAsync once the work enqueued on `st`
  // before the free has run, without waiting for the device. Memory from
  // MallocAsync goes back through FreeAsync only (and Malloc's through
  // Free); no work enqueued after the FreeAsync may touch it.
  absl::StatusOr<DevPtr> MallocAsync(int64_t bytes, Stream st,
                                     Site s = Site::Here()) {
    return DoMallocAsync(bytes, st, s);
  }
  absl::Status FreeAsync(DevPtr p, Stream st, Site s = Site::Here()) {
    return DoFreeAsync(p, st, s);
  }
  // Page-locked host memory mapped into the device address space.
  absl::StatusOr<void*> HostAllocPinned(int64_t bytes, Site s = Site::Here()) {
    return DoHostAllocPinned(bytes, s);
  }
  absl::Status HostFree(void* p, Site s = Site::Here()) {
    return DoHostFree(p, s);
  }
  // The device view of a mapped-pinned host pointer (same value).
  absl::StatusOr<DevPtr> MappedPointer(const void* pinned,
                                       Site s = Site::Here()) {
    return DoMappedPointer(pinned, s);
  }
  // Host code announces its own reads and writes of pinned memory, so that
  // the ordering checker sees them; a device address here is the error of
  // a host dereference of device memory.
  absl::Status HostRead(const void* p, int64_t bytes, Site s = Site::Here()) {
    return DoHostAccess(p, bytes, false, s);
  }
  absl::Status HostWrite(void* p, int64_t bytes, Site s = Site::Here()) {
    return DoHostAccess(p, bytes, true, s);
  }

  // Streams and events.
  absl::StatusOr<Stream> CreateStream(int priority = kLowestPriority,
                                      Site s = Site::Here()) {
    return DoCreateStream(priority, s);
  }
  absl::StatusOr<Event> CreateEvent(Site s = Site::Here()) {
    return DoCreateEvent(s);
  }
  absl::Status Record(Event e, Stream st, Site s = Site::Here()) {
    return DoRecord(e, st, s);
  }
  // Work enqueued on `st` after this runs after the event's last record.
  absl::Status Wait(Stream st, Event e, Site s = Site::Here()) {
    return DoWait(st, e, s);
  }
  // True when the event's last record has completed (never recorded: true).
  absl::StatusOr<bool> Query(Event e, Site s = Site::Here()) {
    return DoQuery(e, s);
  }
  absl::Status Synchronize(Event e, Site s = Site::Here()) {
    return DoSyncEvent(e, s);
  }
  absl::Status Synchronize(Stream st, Site s = Site::Here()) {
    return DoSyncStream(st, s);
  }
  absl::Status SynchronizeDevice(Site s = Site::Here()) {
    return DoSyncDevice(s);
  }

  // Async copies: host sides must be pinned (pageable: INVALID_ARGUMENT).
  absl::Status CopyH2D(DevPtr dst, const void* src, int64_t bytes, Stream st,
                       Site s = Site::Here()) {
    return DoCopyH2D(dst, src, bytes, st, s);
  }
  absl::Status CopyD2H(void* dst, DevPtr src, int64_t bytes, Stream st,
                       Site s = Site::Here()) {
    return DoCopyD2H(dst, src, bytes, st, s);
  }
  absl::Status CopyD2D(DevPtr dst, DevPtr src, int64_t bytes, Stream st,
                       Site s = Site::Here()) {
    return DoCopyD2D(dst, src, bytes, st, s);
  }
  absl::Status Memset(DevPtr dst, uint8_t value, int64_t bytes, Stream st,
                      Site s = Site::Here()) {
    return DoMemset(dst, value, bytes, st, s);
  }
  absl::Status Launch(Op op, Stream st, Site s = Site::Here()) {
    return DoLaunch(std::move(op), st, s);
  }

  // Graph capture: between Begin and End the stream's work is recorded,
  // not run; allocation, frees, synchronisation, queries and pageable
  // copies by the capturing thread are errors there (and invalidate the
  // capture); other threads may go on using other streams (CUDA's
  // thread-local capture mode). Replay enqueues the recorded work again:
  // it reads whatever the same addresses hold then. DestroyGraph releases
  // a graph (its id is not valid after).
  absl::Status BeginCapture(Stream st, Site s = Site::Here()) {
    return DoBeginCapture(st, s);
  }
  absl::StatusOr<Graph> EndCapture(Stream st, Site s = Site::Here()) {
    return DoEndCapture(st, s);
  }
  absl::Status Replay(Graph g, Stream st, Site s = Site::Here()) {
    return DoReplay(g, st, s);
  }
  absl::Status DestroyGraph(Graph g, Site s = Site::Here()) {
    return DoDestroyGraph(g, s);
  }

 protected:
  virtual absl::StatusOr<DevPtr> DoMalloc(int64_t bytes, Site s) = 0;
  virtual absl::Status DoFree(DevPtr p, Site s) = 0;
  virtual absl::StatusOr<DevPtr> DoMallocAsync(int64_t bytes, Stream st,
                                               Site s) = 0;
  virtual absl::Status DoFreeAsync(DevPtr p, Stream st, Site s) = 0;
  virtual absl::StatusOr<void*> DoHostAllocPinned(int64_t bytes, Site s) = 0;
  virtual absl::Status DoHostFree(void* p, Site s) = 0;
  virtual absl::StatusOr<DevPtr> DoMappedPointer(const void* p, Site s) = 0;
  virtual absl::Status DoHostAccess(const void* p, int64_t bytes, bool write,
                                    Site s) = 0;
  virtual absl::StatusOr<Stream> DoCreateStream(int priority, Site s) = 0;
  virtual absl::StatusOr<Event> DoCreateEvent(Site s) = 0;
  virtual absl::Status DoRecord(Event e, Stream st, Site s) = 0;
  virtual absl::Status DoWait(Stream st, Event e, Site s) = 0;
  virtual absl::StatusOr<bool> DoQuery(Event e, Site s) = 0;
  virtual absl::Status DoSyncEvent(Event e, Site s) = 0;
  virtual absl::Status DoSyncStream(Stream st, Site s) = 0;
  virtual absl::Status DoSyncDevice(Site s) = 0;
  virtual absl::Status DoCopyH2D(DevPtr dst, const void* src, int64_t bytes,
                                 Stream st, Site s) = 0;
  virtual absl::Status DoCopyD2H(void* dst, DevPtr src, int64_t bytes,
                                 Stream st, Site s) = 0;
  virtual absl::Status DoCopyD2D(DevPtr dst, DevPtr src, int64_t bytes,
                                 Stream st, Site s) = 0;
  virtual absl::Status DoMemset(DevPtr dst, uint8_t value, int64_t bytes,
                                Stream st, Site s) = 0;
  virtual absl::Status DoLaunch(Op op, Stream st, Site s) = 0;
  virtual absl::Status DoBeginCapture(Stream st, Site s) = 0;
  virtual absl::StatusOr<Graph> DoEndCapture(Stream st, Site s) = 0;
  virtual absl::Status DoReplay(Graph g, Stream st, Site s) = 0;
  virtual absl::Status DoDestroyGraph(Graph g, Site s) = 0;
};

}  // namespace ckv::kernels::device
