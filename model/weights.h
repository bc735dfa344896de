// Views of a model's tensors inside the mapped GGUF file, validated against
// the config. Matrices keep their file type (F32/F16/BF16 or a block type);
// small vectors (norms, biases, rope factors) are converted to owned F32.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "model/gguf/gguf.h"
#include "model/model_config.h"

namespace ckv {

// A row-major matrix [rows][cols] (cols contiguous) in the mapped file.
struct Matrix {
  kernels::DType type = kernels::DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Fused file tensors (attn_qkv, ffn_up = [gate; up]) are bound as row
// ranges: wq/wk/wv and w_gate/w_up then view parts of one file tensor.
struct LayerWeights {
  std::vector<float> attn_norm;
  Matrix wq, wk, wv, wo;
  std::vector<float> bq, bk, bv;      // empty unless config.qkv_bias
  std::vector<float> q_norm, k_norm;  // [head_dim], when config.qk_norm
  std::vector<float> post_attn_norm;  // [d_model], when config.post_norms
  std::vector<float> ffn_norm;
  Matrix w_gate, w_up, w_down;
  std::vector<float> post_ffn_norm;  // [d_model], when config.post_norms
};

struct ModelWeights {
  Matrix token_embd;  // [vocab][d_model]
  std::vector<float> output_norm;
  Matrix output;  // [vocab][d_model]; == token_embd when tied
  // [rope_dims/2] or empty: `rope_freqs` (Llama-3) or `rope_factors_short`.
  std::vector<float> rope_freqs;
  std::vector<float> rope_freqs_long;  // `rope_factors_long`, or empty
  std::vector<LayerWeights> layers;

  // Bytes of matrices read per decode token (for bandwidth reports).
  int64_t MatrixBytes() const;
};

// Binds every tensor the config needs; a missing tensor or a wrong shape is
// INVALID_ARGUMENT naming the tensor. `file` must outlive the result.
absl::StatusOr<ModelWeights> LoadWeights(const gguf::GgufFile& file,
                                         const ModelConfig& config);

}  // namespace ckv
