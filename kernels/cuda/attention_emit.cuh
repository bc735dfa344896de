// The end of one (query row, head)'s attention, shared by the span and
// tile kernels (attention_spans.cu, attention_tiles.cu). Internal: include
// only from .cu files.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_spans.h"

namespace ckv::kernels::cuda::detail {

// Row th's result from its largest score `big`, weight sum `total` and
// unnormalised accumulator sum_of(d): out = sum / total (zeros where
// total is 0), or folded into the streamed state (p.state; the contract
// of ref::AttentionAccumulate). Called by `lanes` threads, this one
// `lane` of them (elements lane, lane + lanes, ...); `sync` orders their
// reads of the state's (max, sum) before lane 0 rewrites them.
template <class SumFn, class SyncFn>
__device__ void EmitRow(const SpanAttentionParams& p, int64_t th, float big,
                        float total, int lane, int lanes, SumFn sum_of,
                        SyncFn sync) {
  const int hd = p.head_dim;
  if (p.state == nullptr) {
    for (int d = lane; d < hd; d += lanes) {
      p.out[th * hd + d] = total > 0.0f ? sum_of(d) / total : 0.0f;
    }
    return;
  }
  float* st = p.state + th * (hd + 2);
  const float old_l = p.fresh ? 0.0f : st[1];
  const float old_m = old_l > 0.0f ? st[0] : -INFINITY;
  const float m = fmaxf(old_m, total > 0.0f ? big : -INFINITY);
  const float f_old = old_l > 0.0f ? expf(old_m - m) : 0.0f;
  const float f_new = total > 0.0f ? expf(big - m) : 0.0f;
  for (int d = lane; d < hd; d += lanes) {
    const float old_acc = old_l > 0.0f ? st[2 + d] : 0.0f;
    st[2 + d] = old_acc * f_old + sum_of(d) * f_new;
  }
  sync();  // every thread has read st[0] and st[1]
  if (lane == 0) {
    st[0] = m;
    st[1] = old_l * f_old + total * f_new;
  }
}

}  // namespace ckv::kernels::cuda::detail
