// AVX-512 QuantToF32: rows unpacked through quant_unpack.inc compiled with
// this file's ISA (the quantised GEMV is quant_dot_avx512.cc). Compiled
// with -mavx512vnni; used only when the CPU has it.
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

void QuantToF32(DType t, const void* src, int64_t n, float* dst) {
  QuantRowToF32(t, src, n, dst);
}

}  // namespace ckv::kernels::cpu::avx512q
