// What the backends that run kernels::cpu:: code (CpuBackend on host
// memory, DeviceBackend's op bodies on the fake device) share: the mapping
// of the seam's types to the CPU kernels' arguments, the embedding loop, and
// the profile clock. Header-only; included by backend .cc files only.
#pragma once

#include <chrono>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "model/backend/backend.h"

namespace ckv {

// Nanoseconds since `t0` (ForwardProfile timings).
inline int64_t NanosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// The CPU kernel's parameters of `rope` (freq_factors as given: a caller
// that maps them elsewhere overwrites the pointer).
inline kernels::cpu::RopeParams CpuRopeParams(const RopeSpec& rope) {
  kernels::cpu::RopeParams p;
  p.mode = rope.style == RopeStyle::kNeox ? kernels::cpu::RopeMode::kNeox
                                          : kernels::cpu::RopeMode::kNormal;
  p.rot_dims = rope.rot_dims;
  p.freq_base = rope.freq_base;
  p.freq_scale = rope.freq_scale;
  p.attn_factor = rope.attn_factor;
  p.freq_factors = rope.freq_factors;
  return p;
}

// out[r] = table[ids[r]] * scale (dequantised) for r < n; `table` holds
// rows of RowBytes(type, cols), `out` rows of `width` floats.
inline void EmbedRows(const uint8_t* table, kernels::DType type, int64_t cols,
                      const int32_t* ids, int64_t n, float scale, int64_t width,
                      float* out) {
  const int64_t row_bytes = kernels::RowBytes(type, cols);
  for (int64_t r = 0; r < n; ++r) {
    float* row = out + r * width;
    kernels::cpu::DequantizeRow(type, table + ids[r] * row_bytes, cols, row);
    if (scale != 1.0f) {
      for (int64_t j = 0; j < width; ++j) row[j] *= scale;
    }
  }
}

}  // namespace ckv
