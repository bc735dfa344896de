// Internal: the BF16 primitives of the avx512_bf16 table shared by its GEMM
// (gemm_bf16_avx512.cc) and attention tiles (attention_bf16_avx512.cc).
// Call only on CPUs with AVX-512 F/BW/VL and AVX512_BF16. A "pair" is the
// 32-bit word holding BF16(x) in its low and BF16(y) in its high half, both
// rounded to nearest even.
#pragma once

#include <cstdint>

namespace ckv::kernels::cpu::avx512bf16 {

// dst[p] = pair (src[2p], src[2p + 1]) for p < (n + 1) / 2 (0 past n).
void ToPairs(const float* src, int64_t n, uint32_t* dst);
// dst[i] = pair (a[i], b[i]) for i < n.
void PairRows(const float* a, const float* b, int n, uint32_t* dst);
// s[i * kTileK + j] = sum over p < n_pairs of the pair products of
// q2[i * ldq2 + p] and kt2[p * kTileK + j], for i < rows, j < kTileK.
void QkBf16(const uint32_t* q2, int ldq2, int rows, const uint32_t* kt2,
            int n_pairs, float* s);
// o[i * ldv + d] = alpha[i] * o[i * ldv + d] + sum over j < n of
// BF16(p[i * kTileK + j]) * vt2's element j of column d, for i < rows,
// d < ldv; vt2[q * ldv + d] = pair (V_2q[d], V_2q+1[d]), rows past n zero;
// p[i * kTileK + j] for n <= j < n rounded up to even must be 0.
void PvBf16(const float* p, int rows, const uint32_t* vt2, int n, int ldv,
            const float* alpha, float* o);

}  // namespace ckv::kernels::cpu::avx512bf16
