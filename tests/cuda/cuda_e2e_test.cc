// End to end: the Transformer on a device backend against the CPU backend,
// through MakeBackend as the server makes it. Parameterised over the fake
// device (runs everywhere: the device check's dry run and CI) and CUDA
// (skipped without a usable device; the device check runs it on a GPU).
//
// What must agree, per device:
//  - tiny random models of every architecture with F32 weights, a sparse
//    ClusterKV store (selection and k-means on the host, from the device's
//    K/V rows): greedy tokens, the attended positions of every (step,
//    layer, head) and the cache statistics exactly, logits within 1e-5 on
//    the fake (the same CPU kernels). K-means runs on the host for these
//    (BackendOptions::host_kmeans). On CUDA the keys and queries come from
//    cuBLAS F32 GEMMs (~1e-7 relative from the CPU's), which can move a
//    key across a k-means tie or a cluster across the top-B boundary, so
//    CUDA is held to: >= 95 % of (step, layer, head) selections identical,
//    logits within 2e-4 up to the first step whose selections differ, and
//    the first 8 greedy tokens equal. With device k-means the budget per
//    head still holds.
//  - the demo model (F16 weights, 4 layers) greedy through a dense cache and
//    a sparse store: tokens equal; logits within 1e-5 (fake) or 3e-2
//    (CUDA rounds activations to F16 before each GEMM, 2^-11 relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/backend/backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "tests/device/greedy_trace.h"

namespace ckv::device_test {
namespace {

class DeviceE2eTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && !CudaDeviceStatus().ok()) {
      GTEST_SKIP() << CudaDeviceStatus().message();
    }
  }
  // host_kmeans: the CPU's clusters, so that selections compare exactly.
  std::unique_ptr<Backend> Make(bool host_kmeans = true) {
    BackendOptions o;
    o.fake_device_bytes = int64_t{256} << 20;
    o.host_kmeans = host_kmeans;
    auto b = MakeBackend(GetParam(), o);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *std::move(b) : nullptr;
  }
  bool cuda() const { return GetParam() == BackendKind::kCuda; }
};

// CUDA against the CPU (see the top): selections mostly identical, logits
// close until the first selection difference, the first tokens equal.
void ExpectCudaClose(const Trace& dev, const Trace& cpu,
                     const std::string& what) {
  ASSERT_TRUE(dev.status.ok()) << what << ": " << dev.status;
  ASSERT_EQ(dev.selected.size(), cpu.selected.size()) << what;
  int64_t same = 0, total = 0;
  size_t first_diff = cpu.selected.size();
  for (size_t step = 0; step < cpu.selected.size(); ++step) {
    ASSERT_EQ(dev.selected[step].size(), cpu.selected[step].size()) << what;
    for (size_t lh = 0; lh < cpu.selected[step].size(); ++lh, ++total) {
      const bool eq = dev.selected[step][lh] == cpu.selected[step][lh];
      same += eq;
      if (!eq) first_diff = std::min(first_diff, step);
    }
  }
  const double agree = total > 0 ? double(same) / total : 1.0;
  EXPECT_GE(agree, 0.95) << what;
  // logits[0] is the prefill's, logits[i + 1] step i's.
  for (size_t i = 0; i <= first_diff && i < cpu.logits.size(); ++i) {
    EXPECT_LE(RelDiff(dev.logits[i], cpu.logits[i]), 2e-4)
        << what << " logits " << i;
  }
  const size_t n = std::min<size_t>(8, cpu.tokens.size());
  EXPECT_EQ(std::vector<int32_t>(dev.tokens.begin(), dev.tokens.begin() + n),
            std::vector<int32_t>(cpu.tokens.begin(), cpu.tokens.begin() + n))
      << what;
  std::printf(
      "%s: %.4f of selections identical, first difference at step "
      "%zu\n",
      what.c_str(), agree, first_diff);
}

TEST_P(DeviceE2eTest, TinyModelsEveryArchSparseSelectionExact) {
  for (const std::string& arch : kArchNames) {
    auto m = LoadModel(testing::RandomModelPath(
        "e2e_f32_" + arch, testing::TinyArchSpec(arch, kernels::DType::kF32)));
    ASSERT_TRUE(m.ok()) << m.status();
    auto backend = Make();
    ASSERT_NE(backend, nullptr);
    const Trace dev = Greedy(**m, std::move(backend), 48, 24);
    const Trace cpu = Greedy(**m, Cpu(), 48, 24);
    if (cuda()) {
      ExpectCudaClose(dev, cpu, arch);
    } else {
      ExpectSameTrace(dev, cpu, arch);
    }
  }
}

TEST_P(DeviceE2eTest, DemoModelGreedyDenseAndSparse) {
  auto m = LoadModel(std::string(CLUSTERKV_MODELS_DIR) + "/kjv-llama.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  const double tol = cuda() ? 3e-2 : 1e-5;
  for (bool dense : {true, false}) {
    auto backend = Make();
    ASSERT_NE(backend, nullptr);
    const Trace dev = Greedy(**m, std::move(backend), 64, 16, dense);
    const Trace cpu = Greedy(**m, Cpu(), 64, 16, dense);
    ExpectCloseTrace(dev, cpu, dense ? "demo dense" : "demo sparse", tol,
                     !cuda());
  }
}

// K-means on the device (the fake runs the CPU's; CUDA its own kernels,
// deterministic but not the CPU's bits): the index builder ran device jobs,
// and every (step, layer, head) attends as many positions as on the CPU
// (the budget does not depend on which clusters were chosen).
TEST_P(DeviceE2eTest, DeviceKMeansKeepsTheBudget) {
  auto m = LoadModel(testing::RandomModelPath(
      "e2e_f32_llama", testing::TinyArchSpec("llama", kernels::DType::kF32)));
  ASSERT_TRUE(m.ok()) << m.status();
  auto backend = Make(/*host_kmeans=*/false);
  ASSERT_NE(backend, nullptr);
  const Trace dev = Greedy(**m, std::move(backend), 48, 24);
  const Trace cpu = Greedy(**m, Cpu(), 48, 24);
  ASSERT_TRUE(dev.status.ok()) << dev.status;
  EXPECT_GT(dev.kmeans_jobs, 0);
  ASSERT_EQ(dev.selected.size(), cpu.selected.size());
  for (size_t step = 0; step < cpu.selected.size(); ++step) {
    ASSERT_EQ(dev.selected[step].size(), cpu.selected[step].size());
    for (size_t lh = 0; lh < cpu.selected[step].size(); ++lh) {
      EXPECT_EQ(dev.selected[step][lh].size(), cpu.selected[step][lh].size())
          << "step " << step << " layer x head " << lh;
    }
  }
  if (!cuda()) ExpectSameTrace(dev, cpu, "fake device k-means");
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceE2eTest,
                         ::testing::Values(BackendKind::kFake,
                                           BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& i) {
                           return std::string(BackendKindName(i.param));
                         });

}  // namespace
}  // namespace ckv::device_test
