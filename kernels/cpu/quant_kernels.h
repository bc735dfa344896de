// Internal: the ISA-specific quantised-weight primitives behind KernelSet's
// quant_gemv and the block-type branch of to_f32 (quant_avx2.cc,
// quant_avx512.cc). Contracts as in kernel_set.h.
#pragma once

#include <cstdint>

#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"

namespace ckv::kernels::cpu {

namespace avx2q {
void QuantToF32(DType t, const void* src, int64_t n, float* dst);
// KernelSet::quantize_acts: cpu::QuantizeActs, vectorised (the same bits).
void QuantizeActs(const float* x, int64_t n, QuantizedActs* out,
                  ActForms forms);
// KernelSet::quant_gemv (contract in kernel_set.h) for every block type (Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS; quant_dot_avx2.cc), with
// the block form of the activations for the 32-element block types and the
// super-block form for the K-quants and IQ4_XS.
void FusedGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy);
}  // namespace avx2q

// Needs AVX-512 F/BW/VL and VNNI.
namespace avx512q {
void QuantToF32(DType t, const void* src, int64_t n, float* dst);
// As avx2q::FusedGemv, with vpdpbusd.
void FusedGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy);
// KernelSet::quant_gemv_batches of FusedGemv: Q4_K, Q5_K, Q6_K.
bool BatchesTokens(DType t);
}  // namespace avx512q

}  // namespace ckv::kernels::cpu
