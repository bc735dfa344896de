// Helpers of the CUDA op tests: the device-present fixture (tests SKIP
// without a device, after checking GetDeviceCount's return code), device
// buffers that are poisoned before use (so unwritten outputs show up as
// NaN), and error measures against the CPU references.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/device_info.h"

namespace ckv::kernels::cuda::testing {

#define CUDA_ASSERT_OK(expr)                                      \
  do {                                                            \
    const cudaError_t e_ = (expr);                                \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Every test of the binary derives from this: no device -> SKIPPED.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const int err = GetDeviceCount(&count);
    if (err != 0 || count == 0) {
      GTEST_SKIP() << "no CUDA device: "
                   << (err != 0 ? ErrorString(err) : "count is 0");
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      cudaStreamDestroy(stream_);
    }
  }
  cudaStream_t stream_ = nullptr;
};

// Device array of n T, filled with 0xff bytes (NaN for floats, -1 for ints)
// until written.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) {
      ptr_ = nullptr;
      return;
    }
    cudaMemset(ptr_, 0xff, std::max<size_t>(1, n) * sizeof(T));
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) {
    if (ptr_ != nullptr && !v.empty()) {
      cudaMemcpy(ptr_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  std::vector<T> Download() const {
    std::vector<T> v(n_);
    if (n_ > 0) {
      cudaDeviceSynchronize();
      cudaMemcpy(v.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    }
    return v;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

// Bytes as a device array (encoded weights/KV rows).
inline std::vector<uint8_t> AsBytes(const void* p, size_t n) {
  std::vector<uint8_t> v(n);
  std::memcpy(v.data(), p, n);
  return v;
}

// ||a - b|| / ||b||; infinity when any value of a is not finite.
inline double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    m = std::max(m, std::fabs(double{a[i]} - b[i]));
  }
  return m;
}

}  // namespace ckv::kernels::cuda::testing
