// The device planner's selection ops on CUDA: the per-thread bodies of
// kernels/device/selection_threads.h (the functions the fake runs, so the
// device and the fake compute the same bits), one kernel per phase.
// Framework-free launchers; each returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device/selection_threads.h"

namespace ckv::kernels::cuda {

// scores[j * ld + c] = threads::ScoreCluster(q + j * dim, panels, c, dim)
// for j < n_q, c < n (the CPU's CentroidScores bits).
cudaError_t ScoreClusters(const float* q, int n_q, const uint16_t* panels,
                          int64_t n, int dim, float* scores, int64_t ld,
                          cudaStream_t stream);

// select_blocks: four kernels (recent pages, rows before the recent range,
// taken blocks written, totals), every pointer of `v` in device memory.
cudaError_t SelectBlocks(const device::threads::SelectView& v,
                         cudaStream_t stream);

// A batch of score_clusters problems (kernels/device/phases.h
// ScoreBatchArgs, device pointers): one thread per (item, query, cluster),
// or per (item, page) for quest items (threads::ScoreItemThread).
struct ScoreBatch {
  const device::threads::ScoreItem* items = nullptr;
  const int64_t* thread_base = nullptr;  // [n_items + 1]
  int32_t n_items = 0;
  int dim = 0;
  const float* q_pool = nullptr;
  int64_t q_elems = 0;
  const uint16_t* panel_pool = nullptr;
  int64_t panel_elems = 0;
  float* score_pool = nullptr;
  int64_t score_elems = 0;
  int64_t total_threads = 0;
};
cudaError_t ScoreClustersBatch(const ScoreBatch& b, cudaStream_t stream);

// select_blocks over n_items problems (items in device memory; max_n: the
// most blocks of one): the four phases as four kernels for the whole batch.
cudaError_t SelectBlocksBatch(const device::threads::SelectItem* items,
                              int32_t n_items, int64_t max_n,
                              cudaStream_t stream);

// row_lists over n_items planned queries (max_slots: the most plan slots
// of one): their ranges, then their rows and positions.
cudaError_t RowListsBatch(const device::threads::RowListItem* items,
                          int32_t n_items, int64_t max_slots,
                          cudaStream_t stream);

// gather_queries: item blockIdx.x, its (KV head, element) pairs on the
// block's threads (threads::GatherQuery).
cudaError_t GatherQueries(const device::threads::QueryItem* items,
                          int32_t n_items, float* pool, int64_t pool_elems,
                          cudaStream_t stream);

}  // namespace ckv::kernels::cuda
