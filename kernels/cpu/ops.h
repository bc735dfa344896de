// CPU compute ops: the fast versions (namespace ckv::kernels::cpu) of the
// references in kernels/ref/ops.h, vectorised (run-time CPU feature
// dispatch) and multi-threaded over a ThreadPool. tests/kernels checks
// every fast op against its reference on random inputs and odd sizes, for
// every kernel table; tests/ops checks every backend's ops the same way.
//
// Conventions: row-major; a "row" is contiguous. Weights are stored as GGUF
// stores them: W[out][in] with `in` contiguous. All activations are F32.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/op_types.h"
#include "kernels/ref/ops.h"

namespace ckv::kernels::cpu {

class ThreadPool;

// The argument types live in kernels/op_types.h (shared by every backend);
// the references in kernels/ref/ops.h.
using kernels::AttentionArgs;
using kernels::KvSpan;
using kernels::KvSpanList;
using kernels::RopeMode;
using kernels::RopeParams;
using kernels::SpanRowPosition;

// --------------------------------------------------------------------- fast
// Same contracts as kernels::ref::, parallelised over `pool` (may be null: one
// thread).
void MatMul(ThreadPool* pool, DType wtype, const void* w, int64_t n_in,
            int64_t n_out, const float* x, int64_t n_tokens, float* y);
void RmsNorm(ThreadPool* pool, const float* x, const float* weight,
             int64_t n_rows, int64_t n, float eps, float* y);
void Rope(ThreadPool* pool, float* x, int64_t n_tokens, int n_heads,
          int head_dim, const int64_t* positions, const RopeParams& p);
void SwiGlu(ThreadPool* pool, const float* gate, const float* up, int64_t n,
            float* out);
void GeluTanhGate(ThreadPool* pool, const float* gate, const float* up,
                  int64_t n, float* out);
void SoftCap(ThreadPool* pool, float* x, int64_t n, float cap);
void AddBias(float* x, const float* bias, int64_t n_rows, int64_t n);
void Add(float* x, const float* y, int64_t n);
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);
// Flash-style (online softmax, tiled): memory independent of context length.
void Attention(ThreadPool* pool, const AttentionArgs& a);

// Name of the kernel set chosen at run time (e.g. "avx512", "avx2", "scalar").
const char* KernelSetName();

// How the active kernel set multiplies weights of type t by a few tokens
// (decode): "f32 dot" (float weights, or the scalar table's dequantise-then-
// dot reference on block types), "int8 dot, unpacked blocks" or "int8 dot,
// fused blocks" (AVX2 Q8_0/Q4_0/Q2_K..Q6_K). For the benchmarks' reports.
const char* QuantDotPath(DType t);

// Forces the kernel set of every fast op for the whole process: "auto" (the
// best exact table for this CPU), "scalar" (the reference path: F32
// activations, exact dequantisation), "avx2", "avx512" or "avx512_bf16"
// (avx512 with prefill GEMMs on BF16-rounded operands; never chosen by
// auto). False (nothing changed) when the name is unknown or this CPU or
// build lacks the instruction set. Call before ops run (not thread-safe
// against running ops).
bool SelectKernels(const char* name);
// The names SelectKernels knows, "auto|scalar|avx2|avx512|avx512_bf16", and
// whether `name` is one of them (whatever this CPU has).
inline constexpr const char* kKernelSetNames =
    "auto|scalar|avx2|avx512|avx512_bf16";
bool IsKernelSetName(const std::string& name);

}  // namespace ckv::kernels::cpu
