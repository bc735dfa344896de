// AVX-512 side of the quantised-weight primitives: QuantGemv sends every
// block type to its VNNI fused dot (quant_dot_avx512.cc); QuantToF32
// unpacks rows through quant_unpack.inc compiled with this file's ISA.
// Compiled with -mavx512vnni; used only when the CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx512q {
namespace {

#include "kernels/cpu/quant_unpack.inc"

}  // namespace

void QuantGemv(DType t, const void* w, int64_t row_bytes, int64_t n_rows,
               int64_t n_in, const QuantizedActs* acts, int n_tok, float* y,
               int64_t ldy) {
  FusedGemv(t, w, row_bytes, n_rows, n_in, acts, n_tok, y, ldy);
}

void QuantToF32(DType t, const void* src, int64_t n, float* dst) {
  QuantRowToF32(t, src, n, dst);
}

}  // namespace ckv::kernels::cpu::avx512q
