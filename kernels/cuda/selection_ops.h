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

// select_blocks: five kernels (recent pages, ranks, rows before the recent
// range, the scan, the writes), every pointer of `v` in device memory.
cudaError_t SelectBlocks(const device::threads::SelectView& v,
                         cudaStream_t stream);

}  // namespace ckv::kernels::cuda
