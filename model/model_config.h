// Hyper-parameters of a decoder-only transformer, read from GGUF metadata.
// The architecture table (model/arch/arch.h) says which optional parts a
// family has; this struct holds the resolved values for one file.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "model/arch/arch.h"
#include "model/gguf/gguf.h"

namespace ckv {

struct ModelConfig {
  std::string arch;  // general.architecture, a row of the arch table
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
  bool qkv_bias = false;         // Q/K/V (or fused QKV) biases present
  bool tied_embeddings = false;  // no `output.weight`: reuse token_embd

  // Block layout (from the arch table).
  FfnActivation ffn_act = FfnActivation::kSiluGate;
  bool fused_qkv = false;
  bool fused_gate_up = false;
  bool qk_norm = false;
  bool post_norms = false;
  float embed_scale = 1.0f;    // token embeddings are multiplied by this
  float attn_scale = 0.0f;     // query scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // > 0: scores -> cap * tanh(scores / cap)
  float final_softcap = 0.0f;  // > 0: the same on the output logits
  // Sliding-window attention: layer l is local (attends only the last
  // `sliding_window` positions) when l % pattern < pattern - 1.
  int sliding_window = 0;  // 0: every layer is global
  int sliding_window_pattern = 1;
  // RoPE of local layers (Gemma-3 uses another base there and no scaling).
  float rope_freq_base_local = 10000.0f;
  float rope_freq_scale_local = 1.0f;
  float rope_attn_factor = 1.0f;  // multiplies cos/sin (Phi-3 LongRoPE)
  // LongRoPE: `rope_factors_long.weight` replaces the short factors when a
  // sequence may exceed rope_orig_context positions.
  bool has_rope_long_factors = false;
  int rope_orig_context = 0;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  bool IsLocalLayer(int layer) const {
    return sliding_window > 0 &&
           layer % sliding_window_pattern < sliding_window_pattern - 1;
  }
  // The layer's attention window (0: unlimited).
  int LayerWindow(int layer) const {
    return IsLocalLayer(layer) ? sliding_window : 0;
  }
};

// Reads and validates the config. Unsupported architectures and missing or
// inconsistent keys yield INVALID_ARGUMENT naming the key.
absl::StatusOr<ModelConfig> ReadModelConfig(const gguf::GgufFile& file);

// JSON object describing the config and tensor types (for `info`).
std::string ModelInfoJson(const ModelConfig& c, const gguf::GgufFile& file);

}  // namespace ckv
