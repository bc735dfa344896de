// FakeRuntime: the device runtime on the CPU, as a test instrument
// (../docs/device-runtime.md). What it checks:
//  - device addresses are not host memory (FakeMemory: an inaccessible
//    reservation; a device address passed as a host pointer is an error);
//  - async copies touch only pinned or device memory (pageable: error);
//  - fresh memory is poisoned, freed memory quarantined (use after free is
//    an error naming the allocation and free sites);
//  - every op's declared byte ranges are checked for stream ordering by
//    vector clocks (OrderingChecker): races are reported with both sites;
//  - an op body touching a range it did not declare is an error;
//  - capture rules (no allocation, free, sync or query inside a capture);
//  - a configurable device size (RESOURCE_EXHAUSTED past it).
// Three schedules run the same enqueued work: kInline (at enqueue), kLazy
// (only when a synchronisation or a cross-stream wait forces it), kThreaded
// (a worker per stream with seeded random delays; op bodies run one at a
// time, in a random interleaving of the streams). Correct programs give
// bit-identical results under all three; a missing wait changes them.
// Phases run their threads in a seeded random order fixed per op, so that
// schedules agree and an order-dependent phase shows up against a reference.
// Thread-safe for one host thread driving it (as a CUDA context is used).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/device/fake_memory.h"
#include "kernels/device/ordering_checker.h"
#include "kernels/device/runtime.h"
#include "kernels/device/schedule.h"

namespace ckv::kernels::device {

struct FakeConfig {
  int64_t device_bytes = int64_t{256} << 20;
  // Freed bytes held back before reuse; < 0: a quarter of the device.
  int64_t quarantine_bytes = -1;
  Schedule schedule = Schedule::kInline;
  uint64_t seed = 1;       // phase thread orders and threaded delays
  int max_delay_us = 200;  // kThreaded: random delay before each item
  std::string name = "fake";
};

class FakeRuntime final : public Runtime {
 public:
  explicit FakeRuntime(FakeConfig config);
  ~FakeRuntime() override;

  // Construction failure (a bad size) is reported here.
  absl::Status init_status() const { return memory_.init_status(); }
  DeviceInfo Info() const override;

  // The ordering checker's verdict: OK, or FAILED_PRECONDITION listing the
  // races found so far.
  absl::Status OrderingStatus() const;
  int64_t race_count() const;
  // Ops run so far (each copy and memset counts as one op).
  int64_t ops_run() const;

 protected:
  absl::StatusOr<DevPtr> DoMalloc(int64_t bytes, Site s) override;
  absl::Status DoFree(DevPtr p, Site s) override;
  absl::StatusOr<DevPtr> DoMallocAsync(int64_t bytes, Stream st,
                                       Site s) override;
  absl::Status DoFreeAsync(DevPtr p, Stream st, Site s) override;
  absl::StatusOr<void*> DoHostAllocPinned(int64_t bytes, Site s) override;
  absl::Status DoHostFree(void* p, Site s) override;
  absl::StatusOr<DevPtr> DoMappedPointer(const void* p, Site s) override;
  absl::Status DoHostAccess(const void* p, int64_t bytes, bool write,
                            Site s) override;
  absl::StatusOr<Stream> DoCreateStream(int priority, Site s) override;
  absl::StatusOr<Event> DoCreateEvent(Site s) override;
  absl::Status DoRecord(Event e, Stream st, Site s) override;
  absl::Status DoWait(Stream st, Event e, Site s) override;
  absl::StatusOr<bool> DoQuery(Event e, Site s) override;
  absl::Status DoSyncEvent(Event e, Site s) override;
  absl::Status DoSyncStream(Stream st, Site s) override;
  absl::Status DoSyncDevice(Site s) override;
  absl::Status DoCopyH2D(DevPtr dst, const void* src, int64_t bytes, Stream st,
                         Site s) override;
  absl::Status DoCopyD2H(void* dst, DevPtr src, int64_t bytes, Stream st,
                         Site s) override;
  absl::Status DoCopyD2D(DevPtr dst, DevPtr src, int64_t bytes, Stream st,
                         Site s) override;
  absl::Status DoMemset(DevPtr dst, uint8_t value, int64_t bytes, Stream st,
                        Site s) override;
  absl::Status DoLaunch(Op op, Stream st, Site s) override;
  absl::Status DoBeginCapture(Stream st, Site s) override;
  absl::StatusOr<Graph> DoEndCapture(Stream st, Site s) override;
  absl::Status DoReplay(Graph g, Stream st, Site s) override;
  absl::Status DoDestroyGraph(Graph g, Site s) override;

 private:
  // One enqueued item: an op to run, or a wait for another stream's item.
  struct Work {
    std::shared_ptr<Op> op;    // null for a wait
    std::vector<void*> views;  // host views of op->reads then op->writes
    uint64_t order_seed = 0;
    Site site;
    int wait_stream = -1;
    int64_t wait_seq = 0;
    DevPtr free_after;  // FreeAsync: freed once the item has run
  };
  struct StreamState {
    int priority = 0;
    int agent = 0;
    std::deque<Work> queue;
    int64_t enqueued = 0, done = 0;
    bool capturing = false;
    std::thread::id capture_thread;  // the thread that began the capture
    absl::Status capture_error;
    std::vector<std::pair<std::shared_ptr<Op>, Site>> captured;
    std::mt19937_64 rng;
    std::thread worker;
  };
  struct EventState {
    int checker_id = 0;
    int stream = -1;  // of the last record
    int64_t seq = 0;
  };
  struct GraphState {
    std::vector<std::pair<std::shared_ptr<Op>, Site>> ops;
    bool destroyed = false;
  };

  using Lock = std::unique_lock<std::mutex>;
  absl::Status CheckStream(Stream st, Site s) const;
  absl::Status CheckEvent(Event e, Site s) const;
  // Both handles valid and the stream not capturing (the fake captures
  // event records and waits of no stream; the capture breaks).
  absl::Status CheckEventCall(const char* call, Stream st, Event e, Site s);
  // Error (and a broken capture) when any stream is capturing.
  absl::Status RejectInCapture(const char* call, Site s);
  // The host side of an async copy: pinned, else the error.
  absl::Status CheckHostSide(const void* p, int64_t bytes, const char* call,
                             Site s) const;
  // CheckHostSide under the lock; a failure also breaks a capture in
  // progress (a failed call inside capture invalidates it, as in CUDA).
  absl::Status CheckCopyHost(const void* p, int64_t bytes, const char* call,
                             Site s);
  absl::Status Enqueue(std::shared_ptr<Op> op, Stream st, Site s, Lock& lock,
                       DevPtr free_after = {});
  // After a work item ran (lock held): its FreeAsync takes effect.
  void FinishItem(const Work& w);
  absl::Status EnqueueCopy(const char* name, DevPtr dst, DevPtr src,
                           int64_t bytes, Stream st, Site s);
  // Runs one item (views resolved at enqueue); returns the op's error.
  absl::Status RunItem(const Work& w);
  // Host-thread schedules: completes stream st up to item seq.
  void RunUntil(int st, int64_t seq, Lock& lock);
  // Waits (or runs) until stream st has completed item seq.
  void Complete(int st, int64_t seq, Lock& lock);
  void WorkerLoop(int st);
  absl::Status TakeAsyncError();

  FakeConfig config_;
  mutable std::mutex mu_;
  std::mutex body_mu_;  // kThreaded: op bodies run one at a time
  std::condition_variable cv_;
  bool stopping_ = false;
  FakeMemory memory_;
  OrderingChecker checker_;
  std::vector<std::unique_ptr<StreamState>> streams_;
  std::vector<EventState> events_;
  std::vector<GraphState> graphs_;
  uint64_t op_counter_ = 0;
  int64_t ops_run_ = 0;
  absl::Status async_error_;
};

}  // namespace ckv::kernels::device
