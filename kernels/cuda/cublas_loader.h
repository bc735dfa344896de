// cuBLAS, opened on first use (dlopen) instead of linked. Linking it runs
// libcublasLt's static initialisers in every process at start, GEMM or
// not: ~0.45 s of CPU and 0.6-1.2 s of wall time for `clusterkv-model
// --help` on a 2-core Zen 4 (perf: 76 % of the run in call_init, 44 % in
// libcublasLt), paid by every CLI command, server start and test binary.
// Only the CUDA backend's GEMM context (gemm.cu) asks for it.
#pragma once

#include <cublas_api.h>

#include <string>

namespace ckv::kernels::cuda {

// The cuBLAS entry points the project calls (cublas_api.h's _v2 forms).
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t handle,
                               cudaStream_t stream) = nullptr;
  cublasStatus_t (*set_workspace)(cublasHandle_t handle, void* workspace,
                                  size_t bytes) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* a,
                            cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta,
                            void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) = nullptr;
};

// The soname opened: libcublas.so.<the toolkit's major version>, found as
// the dynamic loader finds libraries (LD_LIBRARY_PATH, ld.so.cache).
std::string CublasLibraryName();

// The API once the library and every entry point were found (the first
// call loads it; thread-safe); null otherwise, with LastCublasLoadError()
// saying what was missing.
const CublasApi* Cublas();
std::string LastCublasLoadError();

}  // namespace ckv::kernels::cuda
