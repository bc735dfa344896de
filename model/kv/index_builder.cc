#include "model/kv/index_builder.h"

#include <utility>

#include "kernels/cpu/cluster_ops.h"

namespace ckv {

namespace cpu = kernels::cpu;

kernels::ClusterMetric KernelMetric(ClusterMetric m) {
  switch (m) {
    case ClusterMetric::kL2:
      return kernels::ClusterMetric::kL2;
    case ClusterMetric::kInnerProduct:
      return kernels::ClusterMetric::kInnerProduct;
    case ClusterMetric::kCosine:
      break;
  }
  return kernels::ClusterMetric::kCosine;
}

void CpuIndexBuilder::KMeans(absl::Span<const ClusterJob> jobs,
                             std::vector<ClusterResult>* out) {
  std::vector<cpu::KMeansProblem> problems(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterJob& j = jobs[i];
    cpu::KMeansProblem& p = problems[i];
    p.keys = j.keys;
    p.dtype = j.dtype;
    p.stride = j.stride;
    p.n = j.n;
    p.dim = j.dim;
    p.k = j.k;
    p.max_iters = j.max_iters;
    p.seed = j.seed;
    p.metric = KernelMetric(j.metric);
  }
  std::vector<cpu::KMeansResult> results(problems.size());
  cpu::KMeansBatch(pool_, problems.data(), static_cast<int>(problems.size()),
                   results.data());
  out->resize(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    cpu::KMeansResult& r = results[i];
    ClusterResult& c = (*out)[i];
    c.k = r.k;
    c.iterations = r.iterations;
    c.centroids = std::move(r.centroids);
    c.assignment = std::move(r.assignment);
    c.sizes = std::move(r.sizes);
    c.key_scorings = r.key_scorings;
  }
}

}  // namespace ckv
