// End to end: the Transformer on a device backend against the CPU backend,
// through MakeBackend as the server makes it. Parameterised over the fake
// device (runs everywhere: the device check's dry run and CI) and CUDA
// (skipped without a usable device; the device check runs it on a GPU).
//
// What must agree, per device:
//  - tiny random models of every architecture with F32 weights, a sparse
//    ClusterKV store (selection and k-means on the host, from the device's
//    K/V rows): greedy tokens, the attended positions of every (step,
//    layer, head) and the cache statistics exactly; logits within 1e-5
//    (fake: the same CPU kernels) or 2e-4 relative (CUDA: cuBLAS F32
//    GEMMs and F32 online softmax in another order; keys that differ by
//    ~1e-6 leave the clusters and the top-B unchanged on these inputs).
//    K-means runs on the host for these (BackendOptions::host_kmeans: the
//    same index); with device k-means the budget per head still holds.
//  - the demo model (F16 weights, 4 layers) greedy through a dense cache and
//    a sparse store: tokens equal; logits within 1e-5 (fake) or 3e-2
//    (CUDA rounds activations to F16 before each GEMM, 2^-11 relative).
#include <gtest/gtest.h>

#include <memory>
#include <string>

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

TEST_P(DeviceE2eTest, TinyModelsEveryArchSparseSelectionExact) {
  for (const std::string& arch : kArchNames) {
    auto m = LoadModel(testing::RandomModelPath(
        "e2e_f32_" + arch, testing::TinyArchSpec(arch, kernels::DType::kF32)));
    ASSERT_TRUE(m.ok()) << m.status();
    auto backend = Make();
    ASSERT_NE(backend, nullptr);
    const Trace dev = Greedy(**m, std::move(backend), 48, 24);
    const Trace cpu = Greedy(**m, Cpu(), 48, 24);
    ExpectCloseTrace(dev, cpu, arch, cuda() ? 2e-4 : 1e-5, true);
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
