#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/device_info.h"

namespace ckv::kernels::cuda {

int GetDeviceCount(int* count) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  // Without a driver the count is left unset: trust only the return code.
  *count = (err == cudaSuccess) ? n : 0;
  return static_cast<int>(err);
}

int GetDeviceInfo(int index, DeviceInfo* info) {
  cudaDeviceProp prop{};
  const cudaError_t err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) return static_cast<int>(err);
  std::snprintf(info->name, sizeof(info->name), "%s", prop.name);
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->total_memory_bytes = static_cast<long long>(prop.totalGlobalMem);
  info->multiprocessors = prop.multiProcessorCount;
  return static_cast<int>(cudaSuccess);
}

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace ckv::kernels::cuda
