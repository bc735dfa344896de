// Hyper-parameters of a Llama-family model, read from GGUF metadata.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/gguf/gguf.h"

namespace ckv {

enum class RopeStyle { kNormal, kNeox };  // adjacent pairs / split halves

struct ModelConfig {
  std::string arch;  // "llama" or "qwen2"
  std::string name;  // general.name, may be empty
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int context_length = 0;
  float rms_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::kNormal;
  int rope_dims = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / linear scaling factor
  bool has_rope_freqs = false;   // `rope_freqs.weight` present
  bool qkv_bias = false;         // qwen2
  bool tied_embeddings = false;  // no `output.weight`: reuse token_embd

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the config. Unsupported architectures and missing or
// inconsistent keys yield INVALID_ARGUMENT naming the key.
absl::StatusOr<ModelConfig> ReadModelConfig(const gguf::GgufFile& file);

// JSON object describing the config and tensor types (for `info`).
std::string ModelInfoJson(const ModelConfig& c, const gguf::GgufFile& file);

}  // namespace ckv
