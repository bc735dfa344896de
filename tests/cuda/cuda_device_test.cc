// Exercises the CUDA build path. Without a device the tests report SKIPPED.
#include <gtest/gtest.h>

#include "kernels/cuda/device_info.h"

namespace ckv::kernels::cuda {
namespace {

TEST(CudaDevice, CountIsConsistentWithReturnCode) {
  int count = -1;
  const int err = GetDeviceCount(&count);
  if (err != 0) {
    EXPECT_EQ(count, 0) << "count must be 0 when the query fails";
    GTEST_SKIP() << "no CUDA device: " << ErrorString(err);
  }
  EXPECT_GE(count, 1);
}

TEST(CudaDevice, PropertiesOfFirstDevice) {
  int count = 0;
  if (GetDeviceCount(&count) != 0 || count == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  DeviceInfo info;
  ASSERT_EQ(GetDeviceInfo(0, &info), 0);
  EXPECT_GT(info.total_memory_bytes, 0);
  EXPECT_GE(info.compute_major, 7);
  EXPECT_GT(info.multiprocessors, 0);
}

TEST(CudaDevice, InvalidIndexIsAnError) {
  DeviceInfo info;
  EXPECT_NE(GetDeviceInfo(1 << 20, &info), 0);
}

}  // namespace
}  // namespace ckv::kernels::cuda
