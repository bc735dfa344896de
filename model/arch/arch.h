// The architectures the engine runs, and what sets each apart from the
// Llama block. To add an architecture: a row in kArchs (arch.cc), its extra
// metadata in ReadArchExtras (arch.cc), and its tensors in
// model/make_random.cc; weights.cc and transformer.cc act on the flags, so
// they change only when a new kind of operation appears.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/gguf/gguf.h"

namespace ckv {

enum class RopeStyle { kNormal, kNeox };  // adjacent pairs / split halves

enum class FfnActivation {
  kSiluGate,      // down(silu(gate) * up)
  kGeluTanhGate,  // down(gelu_tanh(gate) * up)
};

struct ArchTraits {
  const char* name;  // general.architecture
  RopeStyle rope_style;
  FfnActivation ffn;
  bool fused_qkv;         // blk.N.attn_qkv = [Q; K; V] rows (+ bias)
  bool fused_gate_up;     // blk.N.ffn_up = [gate; up] rows, no ffn_gate
  bool qk_norm;           // per-head RMS attn_q_norm/attn_k_norm before RoPE
  bool post_norms;        // post_attention_norm, post_ffw_norm on sublayers
  bool scale_embeddings;  // token embeddings x sqrt(d_model)
};

// The row of `name`, or null when the engine does not run it.
const ArchTraits* FindArch(absl::string_view name);
// "llama, qwen2, ..." for error messages.
std::string SupportedArchs();

struct ModelConfig;

// Reads the metadata only some architectures have (soft-caps, sliding
// windows, local RoPE, LongRoPE) into `c`, whose shape, RoPE and arch are
// already read. INVALID_ARGUMENT naming the key when a value is out of range.
absl::Status ReadArchExtras(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace ckv
