// The CUDA backend: the device backend (model/backend/device/) on a
// CudaRuntime (kernels/cuda/cuda_runtime.h), whose launchers run the
// forward ops, the planner's selection and the index builder's k-means
// (issue 29). Built when the CUDA part of kernels/ is
// (CLUSTERKV_HAVE_CUDA); otherwise these say so.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"

namespace ckv {

// True when this build has the CUDA backend.
bool CudaBackendBuilt();

// OK when a CUDA device is usable; FAILED_PRECONDITION naming why not (no
// CUDA backend in this build, no driver, no device). Probed once.
absl::Status CudaDeviceStatus();

// A DeviceBackend on CUDA device 0, named "cuda" (device: the GPU's name);
// FAILED_PRECONDITION naming the missing device or driver otherwise.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaDeviceBackend(
    const BackendOptions& options);

}  // namespace ckv
