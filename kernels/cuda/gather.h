// Row gathers: the token-embedding lookup, and the copy of selected KV rows
// (the members of missing clusters) into the device cache arena.
// Framework-free; launchers return the launch's cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

// out[t * out_stride + i] = element i of row tokens[t] of table
// [n_vocab][dim] times scale, i < dim (type kF32, kF16, kBF16 or kQ8_0;
// rows of RowBytes(type, dim) bytes, dim % 32 == 0 for Q8_0), converted to
// F32 exactly as kernels::ref::DequantizeRow does. A token outside
// [0, n_vocab) yields a row of zeros (callers validate ids first).
cudaError_t EmbeddingGather(DType type, const void* table, int64_t n_vocab,
                            int64_t dim, const int32_t* tokens,
                            int64_t n_tokens, float scale, int64_t out_stride,
                            float* out, cudaStream_t stream);

// For i < n: copies row_bytes bytes from src + src_rows[i] * src_stride to
// dst + (dst_rows ? dst_rows[i] : i) * dst_stride (strides in bytes).
// src is device memory or mapped pinned host memory (a device-accessible
// pointer, e.g. from cudaHostAlloc(..., cudaHostAllocMapped) under UVA):
// then the copy reads host memory over PCIe without a staging step.
// Destination rows must not overlap. 16-byte accesses are used when both
// bases, both strides and row_bytes are multiples of 16, else 4, else 1.
cudaError_t GatherRows(const void* src, int64_t src_stride,
                       const int32_t* src_rows, void* dst, int64_t dst_stride,
                       const int32_t* dst_rows, int64_t n, int64_t row_bytes,
                       cudaStream_t stream);

}  // namespace ckv::kernels::cuda
