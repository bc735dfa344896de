// CudaRuntime: the device runtime interface (kernels/device/runtime.h) on a
// CUDA device, one call to one CUDA call (docs/device-runtime.md, "A CUDA
// runtime under the same interface"). Device memory is cudaMalloc'd;
// pinned memory is cudaHostAlloc(mapped) and its device view is the same
// address (unified addressing); streams are non-blocking with priorities
// (never the legacy default stream); events disable timing; copies are
// cudaMemcpyAsync and refuse pageable host memory as the fake does
// (a silent synchronous copy otherwise); an op runs its `device_launch`
// (an op without one is UNIMPLEMENTED: its kernel is not written yet);
// capture is cudaStreamBeginCapture(global) .. cudaGraphInstantiate.
// HostRead/HostWrite check only that the address is not device memory.
// CUDA errors become absl::Status (allocation failures RESOURCE_EXHAUSTED).
// This header needs no CUDA header; the implementation is cuda_runtime.cc.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cstdint>
#include <map>
#include "kernels/device/runtime.h"

namespace ckv::kernels::cuda {

class CudaRuntime final : public device::Runtime {
 public:
  // The runtime of CUDA device `ordinal`; FAILED_PRECONDITION naming the
  // reason when there is no driver or device.
  static absl::StatusOr<std::unique_ptr<CudaRuntime>> Create(int ordinal = 0);
  // What Create checks first, without making anything: OK when device
  // `ordinal` exists, else FAILED_PRECONDITION naming why not.
  static absl::Status Probe(int ordinal = 0);
  ~CudaRuntime() override;

  device::DeviceInfo Info() const override;
  const device::OpLaunchers* launchers() const override;

 protected:
  using DevPtr = device::DevPtr;
  using Site = device::Site;
  absl::StatusOr<DevPtr> DoMalloc(int64_t bytes, Site s) override;
  absl::Status DoFree(DevPtr p, Site s) override;
  absl::StatusOr<DevPtr> DoMallocAsync(int64_t bytes, device::Stream st,
                                       Site s) override;
  absl::Status DoFreeAsync(DevPtr p, device::Stream st, Site s) override;
  absl::StatusOr<void*> DoHostAllocPinned(int64_t bytes, Site s) override;
  absl::Status DoHostFree(void* p, Site s) override;
  absl::StatusOr<DevPtr> DoMappedPointer(const void* p, Site s) override;
  absl::Status DoHostAccess(const void* p, int64_t bytes, bool write,
                            Site s) override;
  absl::StatusOr<device::Stream> DoCreateStream(int priority, Site s) override;
  absl::StatusOr<device::Event> DoCreateEvent(Site s) override;
  absl::Status DoRecord(device::Event e, device::Stream st, Site s) override;
  absl::Status DoWait(device::Stream st, device::Event e, Site s) override;
  absl::StatusOr<bool> DoQuery(device::Event e, Site s) override;
  absl::Status DoSyncEvent(device::Event e, Site s) override;
  absl::Status DoSyncStream(device::Stream st, Site s) override;
  absl::Status DoSyncDevice(Site s) override;
  absl::Status DoCopyH2D(DevPtr dst, const void* src, int64_t bytes,
                         device::Stream st, Site s) override;
  absl::Status DoCopyD2H(void* dst, DevPtr src, int64_t bytes,
                         device::Stream st, Site s) override;
  absl::Status DoCopyD2D(DevPtr dst, DevPtr src, int64_t bytes,
                         device::Stream st, Site s) override;
  absl::Status DoMemset(DevPtr dst, uint8_t value, int64_t bytes,
                        device::Stream st, Site s) override;
  absl::Status DoLaunch(device::Op op, device::Stream st, Site s) override;
  absl::Status DoBeginCapture(device::Stream st, Site s) override;
  absl::StatusOr<device::Graph> DoEndCapture(device::Stream st,
                                             Site s) override;
  absl::Status DoReplay(device::Graph g, device::Stream st, Site s) override;
  absl::Status DoDestroyGraph(device::Graph g, Site s) override;

 private:
  explicit CudaRuntime(int ordinal);
  // The native handles behind the ids (nullptr when the id is unknown).
  void* StreamOf(device::Stream st) const;
  void* EventOf(device::Event e) const;
  // StreamOf, or INVALID_ARGUMENT for an unknown stream.
  absl::StatusOr<void*> NativeStream(device::Stream st) const;
  // OK when [p, p + bytes) lies in one pinned block of this runtime.
  absl::Status CheckPinned(const void* p, int64_t bytes, const char* what,
                           Site s) const;

  int ordinal_;
  std::string name_;
  int64_t total_bytes_ = 0;
  mutable std::mutex mu_;
  std::vector<void*> streams_;           // cudaStream_t, by Stream::id
  std::vector<void*> events_;            // cudaEvent_t, by Event::id
  std::vector<void*> graphs_;            // cudaGraphExec_t, by Graph::id
  std::map<uintptr_t, int64_t> pinned_;  // base -> bytes
  std::unique_ptr<device::OpLaunchers> launchers_;
};

}  // namespace ckv::kernels::cuda
