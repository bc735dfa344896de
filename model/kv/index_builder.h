// Runs the clustering jobs of segment indexes: the k-means of every
// (layer, KV head) of a closing segment. The model layer describes the jobs
// in its own types; a builder decides where they run (the CPU builder:
// kernels::cpu::KMeansBatch, on the calling thread or a pool; a device
// backend's: on its device, on keys already there).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cluster_types.h"
#include "kernels/dtype.h"
#include "model/kv/kv_config.h"

namespace ckv::kernels::cpu {
class ThreadPool;
}  // namespace ckv::kernels::cpu

namespace ckv {

// One k-means problem: n keys of `dim` elements, row i at keys + i*stride
// elements of `dtype` (host memory on the CPU builder).
// The kernels' enum for the model's metric (the CPU and device builders).
kernels::ClusterMetric KernelMetric(ClusterMetric m);

struct ClusterJob {
  const void* keys = nullptr;
  kernels::DType dtype = kernels::DType::kF16;
  int64_t stride = 0;
  int64_t n = 0;
  int dim = 0;
  int k = 1;  // requested clusters, 1 <= k <= n
  int max_iters = 20;
  uint64_t seed = 0;
  ClusterMetric metric = ClusterMetric::kCosine;
};

// The clusters of one job: every output cluster has >= 1 member.
struct ClusterResult {
  int k = 0;
  int iterations = 0;
  std::vector<float> centroids;     // [k][dim]
  std::vector<int32_t> assignment;  // [n], values in [0, k)
  std::vector<int32_t> sizes;       // [k]
  int64_t key_scorings = 0;         // keys scored against all centroids
};

class IndexBuilder {
 public:
  virtual ~IndexBuilder() = default;
  // Solves jobs[i] into (*out)[i]. Deterministic for given jobs: results
  // depend on neither timing nor thread count.
  virtual void KMeans(absl::Span<const ClusterJob> jobs,
                      std::vector<ClusterResult>* out) = 0;
  // True when other threads do the work (index time is then wall time, not
  // the calling thread's CPU time).
  virtual bool uses_other_threads() const = 0;
};

// kernels::cpu::KMeansBatch (the k-means contract of
// kernels/cpu/cluster_ops.h) on `pool`, or the calling thread when null.
class CpuIndexBuilder final : public IndexBuilder {
 public:
  explicit CpuIndexBuilder(kernels::cpu::ThreadPool* pool = nullptr)
      : pool_(pool) {}
  void KMeans(absl::Span<const ClusterJob> jobs,
              std::vector<ClusterResult>* out) override;
  bool uses_other_threads() const override { return pool_ != nullptr; }

 private:
  kernels::cpu::ThreadPool* pool_;
};

}  // namespace ckv
