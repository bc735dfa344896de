// AVX2 QuantToF32: rows unpacked through quant_unpack.inc compiled with this
// file's ISA (the quantised GEMV is quant_dot_avx2.cc); the activation
// quantiser of the fused dots (QuantizeActs), vectorised.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/quant_kernels.h"
#include "kernels/quant_blocks.h"

namespace ckv::kernels::cpu::avx2q {
namespace {

#include "kernels/cpu/quant_unpack.inc"

// One block of `len` (a multiple of 32) activations as the reference's
// QuantizeActBlock (quantize.cc) computes it, 8 lanes at a time with the
// same operations: amax = max |x| (NaN lanes ignored as std::max ignores
// them), d = amax / 127, id = 1 / d (0 for d = 0), q = clamp(round-to-
// nearest-even(x * id), -127, 127). vcvtps2dq rounds as nearbyint does
// under the default rounding mode.
float QuantizeBlock(const float* v, int len, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < len; j += 8) {
    // vmaxps returns its second operand when the first is NaN.
    m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + j), abs_mask), m);
  }
  __m128 m4 =
      _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float d = _mm_cvtss_f32(m4) / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  // packs interleaves 128-bit lanes: dwords 0, 4, 1, 5, ... restore order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int j = 0; j < len; j += 32) {
    __m256i r[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i i =
          _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j + 8 * k), id));
      r[k] = _mm256_min_epi32(_mm256_max_epi32(i, lo), hi);
    }
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]),
                                             _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                        _mm256_permutevar8x32_epi32(bytes, order));
  }
  return d;
}

// out[g] = sum of q[16g .. 16g + 15] for g < n / 16 (n a multiple of 32):
// vpsadbw over q + 128 sums 8 bytes, minus 8 * 128 each.
template <typename T>
void GroupSums(const int8_t* q, int64_t n, T* out) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < n; i += 32) {
    const __m256i s = _mm256_sad_epu8(
        _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i)), bias),
        _mm256_setzero_si256());
    alignas(32) int64_t e[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(e), s);
    out[i / 16] = static_cast<T>(e[0] + e[1] - 16 * 128);
    out[i / 16 + 1] = static_cast<T>(e[2] + e[3] - 16 * 128);
  }
}

// One form of QuantizeActs: n / block blocks into q and d, then the sums
// per 16 of q.
template <typename T>
void QuantizeBlocks(const float* x, int64_t n, int block, int8_t* q, float* d,
                    T* sums) {
  for (int64_t b = 0; b < n / block; ++b) {
    d[b] = QuantizeBlock(x + b * block, block, q + b * block);
  }
  GroupSums(q, n, sums);
}

}  // namespace

void QuantToF32(DType t, const void* src, int64_t n, float* dst) {
  QuantRowToF32(t, src, n, dst);
}

void QuantizeActs(const float* x, int64_t n, QuantizedActs* out,
                  ActForms forms) {
  out->n = n;
  if (forms != ActForms::kBlock) {
    if (n % kSuperAct != 0) {
      out->qk.clear();
      out->dk.clear();
      out->sumk16.clear();
    } else {
      out->qk.resize(n);
      out->dk.resize(n / kSuperAct);
      out->sumk16.resize(n / 16);
      QuantizeBlocks(x, n, kSuperAct, out->qk.data(), out->dk.data(),
                     out->sumk16.data());
    }
  }
  if (forms == ActForms::kSuper) return;
  // Padded with zeros to a multiple of kChunk.
  const int64_t padded = (n + kChunk - 1) / kChunk * kChunk;
  out->q.resize(padded);
  out->d.resize(padded / kActBlock);
  out->sum16.resize(padded / 16);
  QuantizeBlocks(x, n, kActBlock, out->q.data(), out->d.data(),
                 out->sum16.data());
  std::fill(out->q.begin() + n, out->q.end(), int8_t{0});
  std::fill(out->d.begin() + n / kActBlock, out->d.end(), 0.0f);
  std::fill(out->sum16.begin() + n / 16, out->sum16.end(), 0);
}

}  // namespace ckv::kernels::cpu::avx2q
