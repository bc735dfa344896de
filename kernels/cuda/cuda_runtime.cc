#include "kernels/cuda/cuda_runtime.h"

#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_launchers.h"

namespace ckv::kernels::cuda {

namespace dev = kernels::device;

namespace {

absl::Status FromCuda(cudaError_t e, const char* call, dev::Site s) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(call, " at ", dev::SiteString(s), ": ",
                                       cudaGetErrorString(e));
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

cudaStream_t AsStream(void* p) { return static_cast<cudaStream_t>(p); }
cudaEvent_t AsEvent(void* p) { return static_cast<cudaEvent_t>(p); }
void* AsPtr(dev::DevPtr p) { return reinterpret_cast<void*>(p.addr); }

}  // namespace

absl::Status CudaRuntime::Probe(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    int driver = 0;
    cudaDriverGetVersion(&driver);  // 0 when no driver is loaded
    std::string why =
        driver == 0 ? "no CUDA driver is loaded (libcuda.so.1 not found)"
        : e != cudaSuccess
            ? absl::StrCat(cudaGetErrorString(e), " (driver ", driver / 1000,
                           ".", driver % 1000 / 10, ")")
            : "the driver lists none";
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", why));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", ordinal, " does not exist (", count, " found)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaRuntime>> CudaRuntime::Create(int ordinal) {
  if (auto s = Probe(ordinal); !s.ok()) return s;
  auto rt = std::unique_ptr<CudaRuntime>(new CudaRuntime(ordinal));
  cudaDeviceProp prop{};
  if (auto s =
          FromCuda(cudaSetDevice(ordinal), "cudaSetDevice", dev::Site::Here());
      !s.ok()) {
    return s;
  }
  if (auto s = FromCuda(cudaGetDeviceProperties(&prop, ordinal),
                        "cudaGetDeviceProperties", dev::Site::Here());
      !s.ok()) {
    return s;
  }
  rt->name_ = prop.name;
  rt->total_bytes_ = static_cast<int64_t>(prop.totalGlobalMem);
  // MallocAsync's pool keeps what FreeAsync returns (no release to the
  // driver at each synchronisation): reuse without a device-wide sync.
  cudaMemPool_t pool = nullptr;
  if (auto s = FromCuda(cudaDeviceGetDefaultMemPool(&pool, ordinal),
                        "cudaDeviceGetDefaultMemPool", dev::Site::Here());
      !s.ok()) {
    return s;
  }
  uint64_t keep = UINT64_MAX;
  if (auto s = FromCuda(
          cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute", dev::Site::Here());
      !s.ok()) {
    return s;
  }
  auto launchers = CudaLaunchers::Create();
  if (!launchers.ok()) return launchers.status();
  rt->launchers_ = *std::move(launchers);
  return rt;
}

const dev::OpLaunchers* CudaRuntime::launchers() const {
  return launchers_.get();
}

CudaRuntime::CudaRuntime(int ordinal) : ordinal_(ordinal) {}

CudaRuntime::~CudaRuntime() {
  cudaSetDevice(ordinal_);
  cudaDeviceSynchronize();
  launchers_.reset();  // its GEMM scratch is freed on one of the streams
  for (void* g : graphs_) {
    if (g != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  }
  for (void* e : events_) cudaEventDestroy(AsEvent(e));
  for (void* st : streams_) cudaStreamDestroy(AsStream(st));
}

dev::DeviceInfo CudaRuntime::Info() const {
  size_t free_bytes = 0, total = 0;
  dev::DeviceInfo info;
  info.name = name_;
  info.total_bytes = total_bytes_;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) {
    info.free_bytes = static_cast<int64_t>(free_bytes);
  }
  return info;
}

void* CudaRuntime::StreamOf(dev::Stream st) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (st.id < 0 || st.id >= static_cast<int>(streams_.size())) return nullptr;
  return streams_[st.id];
}

void* CudaRuntime::EventOf(dev::Event e) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (e.id < 0 || e.id >= static_cast<int>(events_.size())) return nullptr;
  return events_[e.id];
}

absl::StatusOr<void*> CudaRuntime::NativeStream(dev::Stream st) const {
  void* native = StreamOf(st);
  if (native == nullptr) return absl::InvalidArgumentError("unknown stream");
  return native;
}

absl::Status CudaRuntime::CheckPinned(const void* p, int64_t bytes,
                                      const char* what, dev::Site s) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pinned_.upper_bound(a);
  if (it != pinned_.begin()) {
    --it;
    if (a + static_cast<uintptr_t>(bytes) <= it->first + it->second) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " at ", dev::SiteString(s),
                   ": the host side is not pinned memory of this runtime (an "
                   "async copy from pageable memory would be synchronous)"));
}

absl::StatusOr<dev::DevPtr> CudaRuntime::DoMalloc(int64_t bytes, Site s) {
  void* p = nullptr;
  if (auto st =
          FromCuda(cudaMalloc(&p, static_cast<size_t>(bytes)), "cudaMalloc", s);
      !st.ok()) {
    return st;
  }
  return DevPtr{reinterpret_cast<uint64_t>(p)};
}

absl::Status CudaRuntime::DoFree(DevPtr p, Site s) {
  return FromCuda(cudaFree(AsPtr(p)), "cudaFree", s);
}

absl::StatusOr<dev::DevPtr> CudaRuntime::DoMallocAsync(int64_t bytes,
                                                       dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  void* p = nullptr;
  if (auto e = FromCuda(
          cudaMallocAsync(&p, static_cast<size_t>(bytes), AsStream(*native)),
          "cudaMallocAsync", s);
      !e.ok()) {
    return e;
  }
  return DevPtr{reinterpret_cast<uint64_t>(p)};
}

absl::Status CudaRuntime::DoFreeAsync(DevPtr p, dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaFreeAsync(AsPtr(p), AsStream(*native)), "cudaFreeAsync",
                  s);
}

absl::StatusOr<void*> CudaRuntime::DoHostAllocPinned(int64_t bytes, Site s) {
  void* p = nullptr;
  if (auto st = FromCuda(
          cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocMapped),
          "cudaHostAlloc", s);
      !st.ok()) {
    return st;
  }
  std::lock_guard<std::mutex> lock(mu_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

absl::Status CudaRuntime::DoHostFree(void* p, Site s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.erase(reinterpret_cast<uintptr_t>(p));
  }
  return FromCuda(cudaFreeHost(p), "cudaFreeHost", s);
}

absl::StatusOr<dev::DevPtr> CudaRuntime::DoMappedPointer(const void* p,
                                                         Site s) {
  if (auto st = CheckPinned(p, 1, "MappedPointer", s); !st.ok()) return st;
  void* d = nullptr;
  if (auto st = FromCuda(cudaHostGetDevicePointer(&d, const_cast<void*>(p), 0),
                         "cudaHostGetDevicePointer", s);
      !st.ok()) {
    return st;
  }
  return DevPtr{reinterpret_cast<uint64_t>(d)};
}

absl::Status CudaRuntime::DoHostAccess(const void* p, int64_t /*bytes*/,
                                       bool write, Site s) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) == cudaSuccess &&
      attr.type == cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        write ? "host write" : "host read", " of a device address at ",
        dev::SiteString(s), ": device memory is not host-accessible"));
  }
  cudaGetLastError();  // a pageable pointer is not an error here
  return absl::OkStatus();
}

absl::StatusOr<dev::Stream> CudaRuntime::DoCreateStream(int priority, Site s) {
  int least = 0, greatest = 0;
  cudaDeviceGetStreamPriorityRange(&least, &greatest);
  // The interface's range is CUDA's convention: clamp into the device's.
  const int p =
      priority < greatest ? greatest : (priority > least ? least : priority);
  cudaStream_t st = nullptr;
  if (auto e =
          FromCuda(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, p),
                   "cudaStreamCreateWithPriority", s);
      !e.ok()) {
    return e;
  }
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(st);
  return dev::Stream{static_cast<int>(streams_.size()) - 1};
}

absl::StatusOr<dev::Event> CudaRuntime::DoCreateEvent(Site s) {
  cudaEvent_t ev = nullptr;
  if (auto e = FromCuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                        "cudaEventCreateWithFlags", s);
      !e.ok()) {
    return e;
  }
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(ev);
  return dev::Event{static_cast<int>(events_.size()) - 1};
}

absl::Status CudaRuntime::DoRecord(dev::Event e, dev::Stream st, Site s) {
  void* ev = EventOf(e);
  void* native = StreamOf(st);
  if (ev == nullptr || native == nullptr) {
    return absl::InvalidArgumentError("unknown stream or event");
  }
  return FromCuda(cudaEventRecord(AsEvent(ev), AsStream(native)),
                  "cudaEventRecord", s);
}

absl::Status CudaRuntime::DoWait(dev::Stream st, dev::Event e, Site s) {
  void* ev = EventOf(e);
  void* native = StreamOf(st);
  if (ev == nullptr || native == nullptr) {
    return absl::InvalidArgumentError("unknown stream or event");
  }
  return FromCuda(cudaStreamWaitEvent(AsStream(native), AsEvent(ev), 0),
                  "cudaStreamWaitEvent", s);
}

absl::StatusOr<bool> CudaRuntime::DoQuery(dev::Event e, Site s) {
  void* ev = EventOf(e);
  if (ev == nullptr) return absl::InvalidArgumentError("unknown event");
  const cudaError_t r = cudaEventQuery(AsEvent(ev));
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  if (auto st = FromCuda(r, "cudaEventQuery", s); !st.ok()) return st;
  return true;
}

absl::Status CudaRuntime::DoSyncEvent(dev::Event e, Site s) {
  void* ev = EventOf(e);
  if (ev == nullptr) return absl::InvalidArgumentError("unknown event");
  return FromCuda(cudaEventSynchronize(AsEvent(ev)), "cudaEventSynchronize", s);
}

absl::Status CudaRuntime::DoSyncStream(dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaStreamSynchronize(AsStream(*native)),
                  "cudaStreamSynchronize", s);
}

absl::Status CudaRuntime::DoSyncDevice(Site s) {
  return FromCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize", s);
}

absl::Status CudaRuntime::DoCopyH2D(DevPtr dst, const void* src, int64_t bytes,
                                    dev::Stream st, Site s) {
  if (auto c = CheckPinned(src, bytes, "CopyH2D", s); !c.ok()) return c;
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaMemcpyAsync(AsPtr(dst), src, static_cast<size_t>(bytes),
                                  cudaMemcpyHostToDevice, AsStream(*native)),
                  "cudaMemcpyAsync(H2D)", s);
}

absl::Status CudaRuntime::DoCopyD2H(void* dst, DevPtr src, int64_t bytes,
                                    dev::Stream st, Site s) {
  if (auto c = CheckPinned(dst, bytes, "CopyD2H", s); !c.ok()) return c;
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaMemcpyAsync(dst, AsPtr(src), static_cast<size_t>(bytes),
                                  cudaMemcpyDeviceToHost, AsStream(*native)),
                  "cudaMemcpyAsync(D2H)", s);
}

absl::Status CudaRuntime::DoCopyD2D(DevPtr dst, DevPtr src, int64_t bytes,
                                    dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(
      cudaMemcpyAsync(AsPtr(dst), AsPtr(src), static_cast<size_t>(bytes),
                      cudaMemcpyDeviceToDevice, AsStream(*native)),
      "cudaMemcpyAsync(D2D)", s);
}

absl::Status CudaRuntime::DoMemset(DevPtr dst, uint8_t value, int64_t bytes,
                                   dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaMemsetAsync(AsPtr(dst), value, static_cast<size_t>(bytes),
                                  AsStream(*native)),
                  "cudaMemsetAsync", s);
}

absl::Status CudaRuntime::DoLaunch(dev::Op op, dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  if (!op.device_launch) {
    return absl::UnimplementedError(
        absl::StrCat("op '", op.name, "' at ", dev::SiteString(s),
                     " has no CUDA kernel yet (only its host form exists)"));
  }
  return op.device_launch(*native);
}

absl::Status CudaRuntime::DoBeginCapture(dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  return FromCuda(cudaStreamBeginCapture(AsStream(*native),
                                         cudaStreamCaptureModeThreadLocal),
                  "cudaStreamBeginCapture", s);
}

absl::StatusOr<dev::Graph> CudaRuntime::DoEndCapture(dev::Stream st, Site s) {
  auto native = NativeStream(st);
  if (!native.ok()) return native.status();
  cudaGraph_t graph = nullptr;
  if (auto e = FromCuda(cudaStreamEndCapture(AsStream(*native), &graph),
                        "cudaStreamEndCapture", s);
      !e.ok()) {
    return e;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t r = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (auto e = FromCuda(r, "cudaGraphInstantiate", s); !e.ok()) return e;
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.push_back(exec);
  return dev::Graph{static_cast<int>(graphs_.size()) - 1};
}

absl::Status CudaRuntime::DoReplay(dev::Graph g, dev::Stream st, Site s) {
  void* native = StreamOf(st);
  void* exec = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (g.id >= 0 && g.id < static_cast<int>(graphs_.size())) {
      exec = graphs_[g.id];
    }
  }
  if (native == nullptr || exec == nullptr) {
    return absl::InvalidArgumentError("unknown stream or graph");
  }
  return FromCuda(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), AsStream(native)),
      "cudaGraphLaunch", s);
}

absl::Status CudaRuntime::DoDestroyGraph(dev::Graph g, Site s) {
  void* exec = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (g.id >= 0 && g.id < static_cast<int>(graphs_.size())) {
      std::swap(exec, graphs_[g.id]);
    }
  }
  if (exec == nullptr) return absl::InvalidArgumentError("unknown graph");
  return FromCuda(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)),
                  "cudaGraphExecDestroy", s);
}

}  // namespace ckv::kernels::cuda
