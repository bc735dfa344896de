#include "model/backend/cuda/cuda_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"

#ifdef CLUSTERKV_HAVE_CUDA
#include "kernels/cuda/cuda_runtime.h"
#include "model/backend/device/device_backend.h"
#endif

namespace ckv {

#ifdef CLUSTERKV_HAVE_CUDA

bool CudaBackendBuilt() { return true; }

absl::Status CudaDeviceStatus() {
  static const absl::Status status = kernels::cuda::CudaRuntime::Probe(0);
  return status;
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaDeviceBackend(
    const BackendOptions& options) {
  auto rt = kernels::cuda::CudaRuntime::Create(0);
  if (!rt.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--backend cuda: ", rt.status().message()));
  }
  const kernels::device::DeviceInfo device = (*rt)->Info();
  std::string name = absl::StrCat(device.name, " (CUDA device 0, ",
                                  device.total_bytes >> 20, " MiB)");
  DeviceBackendDebug debug;
  debug.host_kmeans = options.host_kmeans;
  debug.no_graphs = !options.device_graphs;
  auto backend = std::make_unique<DeviceBackend>(
      *std::move(rt), "cuda", std::move(name), debug,
      ResidencyOptions{.mode = options.kv_residency,
                       .budget_bytes = options.resident_kv_bytes,
                       .stream_chunk_bytes = options.kv_stream_chunk_bytes});
  if (!backend->status().ok()) return backend->status();
  return std::unique_ptr<Backend>(std::move(backend));
}

#else  // !CLUSTERKV_HAVE_CUDA

bool CudaBackendBuilt() { return false; }

absl::Status CudaDeviceStatus() {
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (configured without nvcc or with "
      "-DCLUSTERKV_CUDA=OFF)");
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaDeviceBackend(
    const BackendOptions&) {
  return CudaDeviceStatus();
}

#endif

}  // namespace ckv
