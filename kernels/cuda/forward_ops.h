// The small F32 ops of the forward pass, the staged-row scatter and the
// KV append: contracts of kernels/ref/ops.h (Add, AddBias, SoftCap) and of
// kernels/device/op_launchers.h (ScatterRows, AppendRows). Framework-free
// launchers; each returns the launch's cudaError_t (work runs asynchronously).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device/op_tables.h"

namespace ckv::kernels::cuda {

// x[i] += y[i], i < n.
cudaError_t Add(float* x, const float* y, int64_t n, cudaStream_t stream);

// x[r * n + i] += bias[i], r < rows, i < n.
cudaError_t AddBias(float* x, const float* bias, int64_t rows, int64_t n,
                    cudaStream_t stream);

// x[i] = cap * tanh(x[i] / cap), i < n (cap > 0).
cudaError_t SoftCap(float* x, int64_t n, float cap, cudaStream_t stream);

using device::ScatterItem;

// For i < n: copies items[i].bytes bytes from src + items[i].from to
// items[i].dst (destinations must not overlap). items and src may be
// mapped pinned memory. src null: items[i].from is the source's address
// (runs gathered from mapped pinned memory, the device backend's
// copy_runs).
cudaError_t ScatterItems(const char* src, const ScatterItem* items, int64_t n,
                         cudaStream_t stream);

using device::AppendItem;

// For i < n: row items[i].src_row of k and v (F32, n_kv * head_dim) rounded
// to F16 (bf16 false) or BF16 with the host's bits (kernels/dtype.h: NaN as
// the host writes it), written to the item's device rows and host copy.
cudaError_t AppendRows(const float* k, const float* v, const AppendItem* items,
                       int64_t n, int n_kv, int head_dim, bool bf16,
                       cudaStream_t stream);

}  // namespace ckv::kernels::cuda
