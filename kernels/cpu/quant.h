// Quantised weight types on the CPU: the quantiser (used by make-random and
// the tests) and the 8-bit activation format of the fast integer dot
// products. The reference dequantiser is kernels::ref::DequantizeRow
// (kernels/ref/ops.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu {

// Quantises one row of n floats (n a multiple of BlockSize(t)) into
// RowBytes(t, n) bytes at dst. Round-to-nearest with a per-block scale
// search; not bit-identical to llama.cpp's quantiser, but a row it writes
// dequantises (kernels::ref::DequantizeRow) to within the type's step size.
void QuantizeRow(DType t, const float* src, int64_t n, void* dst);

// Activations quantised for the integer dot products, in two forms.
// Block form (the 32-element weight types):
// per block of 32, x[i] ~= d[i / 32] * q[i]; sum16[g] = sum of q over
// elements 16g..16g+15; padded with zeros to a multiple of kChunk elements.
// Super-block form (K-quant and IQ4_XS weights, filled only when
// n % kSuperAct == 0): per 256 elements one scale, x[i] ~= dk[i / 256] *
// qk[i]; sumk16[g] = sum of qk over elements 16g..16g+15 (|sum| <= 16 * 127
// fits int16). One scale per super-block lets a 256-element block's dot
// product accumulate in int32 across its sub-blocks and convert to float
// once per 256 weights.
inline constexpr int kActBlock = 32;
inline constexpr int kSuperAct = 256;
struct QuantizedActs {
  int64_t n = 0;
  std::vector<int8_t> q;        // [n]
  std::vector<float> d;         // [n / 32]
  std::vector<int32_t> sum16;   // [n / 16]
  std::vector<int8_t> qk;       // [n] or empty
  std::vector<float> dk;        // [n / 256] or empty
  std::vector<int16_t> sumk16;  // [n / 16] or empty
};

// Which forms QuantizeActs fills (a fused dot reads one: the super-block
// form for the K-quants and IQ4_XS, the block form for the others); the
// form not asked for is left as it was.
enum class ActForms { kBoth, kBlock, kSuper };

// Quantises x[0..n) (n a multiple of 32) into `forms`: d = max|x| / 127 per
// block (of 32, resp. 256), q = round-to-nearest-even(x * (1 / d)), so
// |x - d * q| <= d / 2. The super-block form is left empty when
// n % 256 != 0. The reference: KernelSet::quantize_acts gives the same bits.
void QuantizeActs(const float* x, int64_t n, QuantizedActs* out,
                  ActForms forms = ActForms::kBoth);

// Elements unpacked per call of UnpackChunk (a K-quant super-block).
inline constexpr int kChunk = 256;
inline constexpr int kChunkGroups = kChunk / 16;

// A chunk of up to kChunk weights in the form the integer dot products use:
// element i of group g = i / 16 is scale[g] * w[i] + bias[g].
struct UnpackedChunk {
  alignas(64) int8_t w[kChunk];
  alignas(64) float scale[kChunkGroups];
  alignas(64) float bias[kChunkGroups];
};

}  // namespace ckv::kernels::cpu
