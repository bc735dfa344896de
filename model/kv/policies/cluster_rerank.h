// The second stage of the clusterkv_rerank policy (docs/clusterkv.md,
// "Selection"): the candidate clusters -- the head of clusterkv's centroid
// order, several budgets' worth -- reordered by the attention mass per row
// their keys hold for the queries, computed exactly from the host-tier
// keys. A cluster's centroid score is the mean of its members' q . k, so
// one key that holds a head's attention (a needle) is diluted by the tens
// of keys it shares a cluster with; its mass is not. Mass per row, not
// total mass: the budget is counted in rows, and on the demo model the
// total ranked large clusters first and recalled less (docs/clusterkv.md).
// Reading the candidates' keys costs factor x B key rows per plan, not the
// whole context.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "model/kv/selection.h"

namespace ckv {

class ClusterRerank {
 public:
  // A candidate: the first `rows` rows (members in ascending position; at
  // least one) of cluster `id` of segment `segment`.
  struct Candidate {
    int32_t segment = 0;
    int32_t id = 0;
    int32_t rows = 0;
  };

  // Scores every row of the candidates against the n_q queries (each
  // [ctx.head_dim], post-RoPE) and returns the candidate indices by
  // descending mass per row (a cluster's mass over its rows), ties by
  // candidate index (the stage-1 order). A row's mass is sum_j exp((q_j . k
  // - m_j) / sqrt(head_dim)), m_j = query j's largest score over all
  // candidate rows: each query's softmax over the candidates, unnormalised,
  // summed over the queries. The keys are of type `kv_dtype` (the store's
  // host tier).
  const std::vector<int32_t>& Rank(const PlanContext& ctx,
                                   kernels::DType kv_dtype,
                                   const float* const* qs, int n_q,
                                   const std::vector<Candidate>& candidates);
  // After Rank: the first row of the `take` consecutive rows of candidate
  // c (take <= its rows) that hold the most mass; the earliest on ties.
  int32_t BestWindow(int32_t c, int32_t take) const;

 private:
  std::vector<float> q_, scores_;
  std::vector<double> row_mass_;
  std::vector<int64_t> first_row_;  // candidate -> its first row in row_mass_
  std::vector<double> mass_;
  std::vector<int32_t> order_;
};

}  // namespace ckv
