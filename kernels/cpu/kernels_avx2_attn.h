// Internal: the AVX2 attention and SwiGLU primitives (kernels_avx2_attn.cc),
// entries of the AVX2 KernelSet; contracts as in kernel_set.h.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cpu::avx2 {

void LoadKt(DType t, const void* k, int64_t stride, const int32_t* rows, int n,
            int hd, float* kt);
void LoadV(DType t, const void* v, int64_t stride, const int32_t* rows, int n,
           int hd, int ldv, float* vt);
void Qk(const float* q, int ldq, int rows, const float* kt, int hd, float* s);
void QkRowMajor(const float* q, int ldq, int rows, const float* kr, int ldk,
                int n, float* s);
void QkDirect(DType t, const void* k, int64_t stride, const int32_t* idx, int n,
              int hd, const float* q, int ldq, int rows, float* s);
void PvDirect(DType t, const void* v, int64_t stride, const int32_t* idx, int n,
              int hd, const float* p, int rows, const float* alpha, float* o,
              int ldo);
float SoftmaxRow(float* s, uint64_t valid, float* m, float* l);
void Pv(const float* p, int rows, const float* vt, int n, int ldv,
        const float* alpha, float* o);
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace ckv::kernels::cpu::avx2
