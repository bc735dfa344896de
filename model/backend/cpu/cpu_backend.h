// The CPU backend: today's kernels::cpu:: calls, on host float activations,
// with a private thread pool. Bit-identical to the forward pass before the
// backend seam (the golden tests hold it).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/backend/backend.h"

namespace ckv {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);
  ~CpuBackend() override;

  // The worker pool, exposed only for CPU benchmarks' pool statistics and
  // schedule; the model layer never uses it.
  kernels::cpu::ThreadPool* pool() { return pool_.get(); }

  Activation NewActivation(int64_t width) override;
  void BeginStep(absl::Span<const int64_t> positions) override;
  void EndStep() override {}
  void Embed(const Matrix& table, absl::Span<const int32_t> tokens, float scale,
             Activation out) override;
  void MatMul(const Matrix& w, Activation x, Activation y) override;
  void AddBias(Activation x, absl::Span<const float> bias) override;
  void RmsNorm(Activation x, absl::Span<const float> weight, float eps,
               Activation out) override;
  void Rope(Activation x, int n_heads, const RopeSpec& rope) override;
  void Gate(FfnActivation act, Activation gate, Activation up,
            Activation out) override;
  void Add(Activation x, Activation y) override;
  void Attention(int layer, const AttentionSpec& spec,
                 absl::Span<const AttentionPart> parts, Activation q,
                 Activation k, Activation v, Activation out,
                 ForwardProfile* profile) override;
  void ReadRows(Activation a, std::vector<float>* out) override;
  void Logits(Activation x, absl::Span<const int64_t> rows,
              absl::Span<const float> norm, float eps, const Matrix& output,
              float softcap, std::vector<float>* out) override;

 protected:
  BackendInfo DoInfo() const override { return info_; }

 private:
  struct Buffer {
    int64_t width = 0;
    std::vector<float> data;  // rows_ x width
  };

  float* Data(Activation a) { return buffers_[a.id].data.data(); }
  int64_t Width(Activation a) const { return buffers_[a.id].width; }

  std::unique_ptr<kernels::cpu::ThreadPool> pool_;
  BackendInfo info_;
  std::vector<Buffer> buffers_;
  std::vector<int64_t> pos_;     // positions of the step's rows
  std::vector<float> gathered_;  // logits rows, normalised
  std::vector<AttendSet> attend_;  // per part of an Attention call
  int64_t rows_ = 0;
};

}  // namespace ckv
