// Random clustered segments and device plans over them, shared by the
// selection and cache-list tests: segments with a k-cluster index on
// (layer 0, KV head 0) — ties, NaN and ±inf centroids planted — and the
// plans the device's score_clusters + select_blocks ops make for queries.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "kernels/device/runtime.h"
#include "kernels/device/selection_phases.h"
#include "model/kv/kv_config.h"
#include "model/kv/segment.h"

namespace ckv::kernels::device {

struct Problem {
  std::vector<std::unique_ptr<Segment>> owned;
  std::vector<const Segment*> segs;
  std::vector<std::vector<float>> queries;  // n_q x head_dim
  int head_dim = 0;
};

// A segment of `n` rows with a k-cluster index on (layer 0, KV head 0):
// every cluster non-empty, members ascending; some centroids planted as
// duplicates (ties), with NaN, or with values past F16's range (±inf).
std::unique_ptr<Segment> MakeSegment(std::mt19937& rng, int64_t first_pos,
                                     int n, int head_dim);

// n_segs segments of 1..150 rows back to back, n_q random queries.
Problem MakeProblem(std::mt19937& rng, int n_segs, int n_q, int head_dim);

struct DevicePlan {
  PlanTotals totals;
  std::vector<PlannedBlock> blocks;
};

// Scores every cluster of every segment for `queries` (ScoreClustersOp per
// segment into one [n_q][total] buffer), then plans each query
// (SelectBlocksOp each); batched: one ScoreClustersBatchOp and one
// SelectBlocksBatchOp for all of it, as the device planner launches them.
// On a runtime with launchers (CUDA) the ops run their device kernels.
// args_out: each query's SelectArgs (its plan stays on the device).
std::vector<DevicePlan> PlanOn(Runtime& rt, const Problem& p,
                               const std::vector<std::vector<float>>& queries,
                               const KvStoreConfig& c, bool batched,
                               std::vector<SelectArgs>* args_out = nullptr);

}  // namespace ckv::kernels::device
