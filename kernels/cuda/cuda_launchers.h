// The device backend's forward ops on CUDA (kernels/device/op_launchers.h):
// each launcher maps its argument block onto a kernels/cuda/ launcher on
// the given stream (DevPtr addresses are the device's own under unified
// addressing). Weights: F32, F16 and BF16 as stored (cuBLAS GEMMs with F32
// accumulation, activations rounded to the weight type); every other type
// is uploaded dequantised to BF16 by the backend (TakesWeightType). One
// instance per CudaRuntime; its
// GEMM context (a cuBLAS handle and the activation scratch) serves every
// stream of that runtime in stream order, which one compute stream keeps.
#pragma once

#include <memory>

#include "kernels/device/op_launchers.h"

namespace ckv::kernels::cuda {

class GemmContext;

class CudaLaunchers final : public device::OpLaunchers {
 public:
  // Needs the runtime's device current (cuBLAS handle creation).
  static absl::StatusOr<std::unique_ptr<CudaLaunchers>> Create();
  ~CudaLaunchers() override;

  bool TakesWeightType(DType type) const override;
  absl::Status Embed(const device::EmbedArgs& a, void* stream) const override;
  absl::Status MatMul(const device::MatMulArgs& a, void* stream) const override;
  absl::Status AddBias(const device::AddBiasArgs& a,
                       void* stream) const override;
  absl::Status RmsNorm(const device::RmsNormArgs& a,
                       void* stream) const override;
  absl::Status Rope(const device::RopeArgs& a, void* stream) const override;
  absl::Status Gate(const device::GateArgs& a, void* stream) const override;
  absl::Status Add(const device::AddArgs& a, void* stream) const override;
  absl::Status Attention(const device::AttentionArgs& a,
                         void* stream) const override;
  absl::Status AttentionFinish(const device::AttentionFinishArgs& a,
                               void* stream) const override;
  absl::Status Logits(const device::LogitsArgs& a, void* stream) const override;
  absl::Status ScatterRows(const device::ScatterRowsArgs& a,
                           void* stream) const override;
  absl::Status AppendRows(const device::AppendRowsArgs& a,
                          void* stream) const override;
  absl::Status ScoreClusters(const device::ScoreClustersArgs& a,
                             void* stream) const override;
  absl::Status SelectBlocks(const device::SelectArgs& a,
                            void* stream) const override;
  absl::Status ScoreClustersBatch(const device::ScoreBatchArgs& a,
                                  void* stream) const override;
  absl::Status SelectBlocksBatch(const device::SelectBatchArgs& a,
                                 void* stream) const override;
  absl::Status GatherQueries(const device::GatherQueriesArgs& a,
                             void* stream) const override;
  absl::Status RowListsBatch(const device::RowListsBatchArgs& a,
                             void* stream) const override;
  absl::Status CacheListsBatch(const device::CacheListsArgs& a,
                               void* stream) const override;
  int64_t KMeansScratchBytes(int64_t n, int k, int dim) const override;
  absl::Status KMeans(const device::KMeansArgs& a, void* stream) const override;

 private:
  explicit CudaLaunchers(GemmContext* gemm) : gemm_(gemm) {}
  GemmContext* gemm_;
};

}  // namespace ckv::kernels::cuda
