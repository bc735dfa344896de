// Weight matmul through cuBLAS: y[t][o] = sum_i W[o][i] * x[t][i], the
// contract of kernels::ref::MatMul. W is [n_out][n_in] (GGUF layout) in F32,
// F16 or BF16; x and y are F32. For F16/BF16 weights x is rounded to the
// weight type on the device and the product runs on the tensor cores with
// F32 accumulation (CUBLAS_COMPUTE_32F); F32 weights use a plain F32 GEMM.
// Q8_0 weights are not supported here (dequantize at load).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

// Owns a cuBLAS handle with a fixed 32 MiB workspace (set again after every
// cublasSetStream, which resets it) and a scratch buffer for the
// low-precision copy of x. Not thread-safe: one context per stream/thread.
class GemmContext;

// cudaErrorSharedObjectInitFailed when cuBLAS could not be loaded
// (cublas_loader.h: LastCublasLoadError() says why).
cudaError_t CreateGemmContext(GemmContext** out);
// Frees everything; waits for work queued on the context's scratch.
cudaError_t DestroyGemmContext(GemmContext* ctx);

// Plan step: sizes the scratch for products of up to max_tokens x max_in
// (optional: MatMul grows it on demand, stream-ordered, otherwise).
cudaError_t ReserveGemm(GemmContext* ctx, int64_t max_tokens, int64_t max_in,
                        cudaStream_t stream);

// Run step. cuBLAS statuses map to cudaError_t: NOT_SUPPORTED ->
// cudaErrorNotSupported, ALLOC_FAILED -> cudaErrorMemoryAllocation,
// INVALID_VALUE -> cudaErrorInvalidValue, others -> cudaErrorUnknown.
// Every size must fit in int (cuBLAS's 32-bit API).
cudaError_t MatMul(GemmContext* ctx, DType wtype, const void* w, int64_t n_in,
                   int64_t n_out, const float* x, int64_t n_tokens, float* y,
                   cudaStream_t stream);

}  // namespace ckv::kernels::cuda
