// Quest baseline on the GPU: per-page channel min/max of the keys, and page
// scores sum_d max(q_d * max_d, q_d * min_d). Contracts of
// kernels::ref::QuestPageBounds / QuestScores, batched over heads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace ckv::kernels::cuda {

// Head h's row i: keys + h * head_stride + i * row_stride (elements of
// dtype: kF32, kF16, kBF16). Pages of page_size rows cut from [0, n) (the
// last may be shorter); page_min/page_max: [n_heads][ceil(n/page_size)][dim].
cudaError_t QuestPageBounds(const void* keys, DType dtype, int64_t head_stride,
                            int64_t row_stride, int n_heads, int64_t n,
                            int dim, int page_size, float* page_min,
                            float* page_max, cudaStream_t stream);

// scores[h][p] for query head h (q: [n_q_heads][dim]) against the pages of
// KV head h / (n_q_heads / n_kv_heads); bounds laid out as above.
cudaError_t QuestScores(const float* q, int n_q_heads, int n_kv_heads,
                        const float* page_min, const float* page_max,
                        int64_t n_pages, int dim, float* scores,
                        cudaStream_t stream);

}  // namespace ckv::kernels::cuda
