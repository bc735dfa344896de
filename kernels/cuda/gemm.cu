#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_loader.h"

namespace ckv::kernels::cuda {

class GemmContext {
 public:
  const CublasApi* api = nullptr;  // loaded by CreateGemmContext
  cublasHandle_t handle = nullptr;
  void* scratch = nullptr;  // low-precision copy of x
  size_t scratch_bytes = 0;
  cudaStream_t scratch_stream = nullptr;  // stream of the last allocation
  void* cublas_ws = nullptr;  // cuBLAS's fixed workspace (kCublasWorkspace)
};

namespace {

constexpr int kThreads = 256;
// cuBLAS's workspace, allocated once with the context: no allocation by
// cuBLAS inside a step (or a captured graph). 32 MiB: NVIDIA's advice for
// Hopper.
constexpr size_t kCublasWorkspace = size_t{32} << 20;

cudaError_t FromCublas(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    default:
      return cudaErrorUnknown;
  }
}

template <typename T>
__device__ T FromF32(float v);
template <>
__device__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void ConvertKernel(const float* __restrict__ x, int64_t n,
                              T* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = FromF32<T>(x[i]);
  }
}

cudaError_t EnsureScratch(GemmContext* ctx, size_t bytes, cudaStream_t stream) {
  if (ctx->scratch_bytes >= bytes) return cudaSuccess;
  if (ctx->scratch != nullptr) {
    CKV_CUDA_RETURN_IF_ERROR(cudaFreeAsync(ctx->scratch, stream));
    ctx->scratch = nullptr;
    ctx->scratch_bytes = 0;
  }
  CKV_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&ctx->scratch, bytes, stream));
  ctx->scratch_bytes = bytes;
  ctx->scratch_stream = stream;
  return cudaSuccess;
}

template <typename T>
cudaError_t ConvertX(const float* x, int64_t n, void* out,
                     cudaStream_t stream) {
  const int64_t blocks =
      std::clamp<int64_t>(detail::DivUp(n, kThreads), 1, 1 << 16);
  ConvertKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, n, static_cast<T*>(out));
  return cudaGetLastError();
}

// Row-major y[T][O] = x[T][I] * W[O][I]^T is, column-major,
// y^T (O x T) = op_T(W as I x O) * (x as I x T).
cudaError_t Gemm(GemmContext* ctx, cudaDataType_t ab_type, const void* w,
                 const void* x, int n_in, int n_out, int n_tokens, float* y) {
  const float alpha = 1.0f, beta = 0.0f;
  return FromCublas(ctx->api->gemm_ex(
      ctx->handle, CUBLAS_OP_T, CUBLAS_OP_N, n_out, n_tokens, n_in, &alpha, w,
      ab_type, n_in, x, ab_type, n_in, &beta, y, CUDA_R_32F, n_out,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

cudaError_t CreateGemmContext(GemmContext** out) {
  *out = nullptr;
  const CublasApi* api = Cublas();
  if (api == nullptr) return cudaErrorSharedObjectInitFailed;
  auto* ctx = new GemmContext;
  ctx->api = api;
  cudaError_t err = FromCublas(api->create(&ctx->handle));
  if (err == cudaSuccess) err = cudaMalloc(&ctx->cublas_ws, kCublasWorkspace);
  if (err != cudaSuccess) {
    if (ctx->handle != nullptr) api->destroy(ctx->handle);
    delete ctx;
    *out = nullptr;
    return err;
  }
  *out = ctx;
  return cudaSuccess;
}

cudaError_t DestroyGemmContext(GemmContext* ctx) {
  if (ctx == nullptr) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  if (ctx->scratch != nullptr) {
    err = cudaFreeAsync(ctx->scratch, ctx->scratch_stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(ctx->scratch_stream);
  }
  const cudaError_t err2 = FromCublas(ctx->api->destroy(ctx->handle));
  if (ctx->cublas_ws != nullptr) cudaFree(ctx->cublas_ws);
  delete ctx;
  return err != cudaSuccess ? err : err2;
}

cudaError_t ReserveGemm(GemmContext* ctx, int64_t max_tokens, int64_t max_in,
                        cudaStream_t stream) {
  if (max_tokens < 0 || max_in < 0) return cudaErrorInvalidValue;
  return EnsureScratch(ctx, static_cast<size_t>(max_tokens * max_in) * 2,
                       stream);
}

cudaError_t MatMul(GemmContext* ctx, DType wtype, const void* w, int64_t n_in,
                   int64_t n_out, const float* x, int64_t n_tokens, float* y,
                   cudaStream_t stream) {
  if (ctx == nullptr || n_in <= 0 || n_out <= 0 || n_tokens < 0 ||
      n_in > INT_MAX || n_out > INT_MAX || n_tokens > INT_MAX) {
    return cudaErrorInvalidValue;
  }
  if (n_tokens == 0) return cudaSuccess;
  CKV_CUDA_RETURN_IF_ERROR(
      FromCublas(ctx->api->set_stream(ctx->handle, stream)));
  // cublasSetStream resets the workspace to cuBLAS's pool: set ours again.
  CKV_CUDA_RETURN_IF_ERROR(FromCublas(
      ctx->api->set_workspace(ctx->handle, ctx->cublas_ws, kCublasWorkspace)));
  const int i = static_cast<int>(n_in), o = static_cast<int>(n_out),
            t = static_cast<int>(n_tokens);
  if (wtype == DType::kF32) return Gemm(ctx, CUDA_R_32F, w, x, i, o, t, y);
  if (wtype != DType::kF16 && wtype != DType::kBF16) {
    return cudaErrorNotSupported;
  }
  const int64_t n = n_tokens * n_in;
  CKV_CUDA_RETURN_IF_ERROR(EnsureScratch(ctx, n * 2, stream));
  if (wtype == DType::kF16) {
    CKV_CUDA_RETURN_IF_ERROR(ConvertX<__half>(x, n, ctx->scratch, stream));
    return Gemm(ctx, CUDA_R_16F, w, ctx->scratch, i, o, t, y);
  }
  CKV_CUDA_RETURN_IF_ERROR(ConvertX<__nv_bfloat16>(x, n, ctx->scratch, stream));
  return Gemm(ctx, CUDA_R_16BF, w, ctx->scratch, i, o, t, y);
}

}  // namespace ckv::kernels::cuda
