// CUDA device query. Framework-free host API; returns cudaError_t values as
// int so that callers need no CUDA headers.
#pragma once

namespace ckv::kernels::cuda {

struct DeviceInfo {
  char name[256] = {};
  int compute_major = 0;
  int compute_minor = 0;
  long long total_memory_bytes = 0;
  int multiprocessors = 0;
};

// Number of usable CUDA devices in *count (0 when no driver or device is
// present: then the return is the CUDA error, e.g. 35 or 100, and *count=0).
int GetDeviceCount(int* count);
// Properties of device `index`; returns the cudaError_t.
int GetDeviceInfo(int index, DeviceInfo* info);
// Human-readable name of a returned error code.
const char* ErrorString(int error);

}  // namespace ckv::kernels::cuda
