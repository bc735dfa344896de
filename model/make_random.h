// Writes a valid GGUF with random weights for any architecture of the arch
// table (model/arch/arch.h): the demo model, and the models of tests and
// benchmarks. Deterministic for a given spec.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace ckv {

// A ChatML template (Qwen-style turns) that starts with bos_token, for
// random models made with vocab "byte-chatml".
inline constexpr char kChatMlTemplate[] =
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}";

struct RandomModelSpec {
  int layers = 2;
  int dim = 256;
  int heads = 8;
  int kv_heads = 2;
  int ffn = 704;
  // "byte": a 259-token byte vocabulary (<unk>, <s>, </s>, <0x00>..<0xFF>);
  // "byte-chatml": the same plus control tokens <|im_start|> (259) and
  // <|im_end|> (260, end of generation by its text), without SentencePiece's
  // space prefix; otherwise the path of a GGUF whose tokenizer.* metadata is
  // copied.
  std::string vocab = "byte";
  // Written as tokenizer.chat_template when non-empty (Jinja source).
  std::string chat_template;
  kernels::DType dtype = kernels::DType::kF16;  // matrices; norms stay F32
  // llama.cpp's "_K_M" mix on top of dtype (Q4_K_M, Q5_K_M): output.weight
  // and attn_v/ffn_down of the layers given more bits (i < n/8, i >= 7n/8,
  // or (i - n/8) % 3 == 2, n = layers) in Q6_K.
  bool k_m_mix = false;
  uint64_t seed = 1;
  int context_length = 131072;
  float rope_freq_base = 500000.0f;
  bool rope_freqs = false;  // add Llama-3 style rope_freqs.weight factors
  // A row of the arch table. Each architecture gets its own tensors and
  // metadata: qwen2 QKV biases; qwen3 Q/K norms; phi3 fused QKV and
  // gate/up with LongRoPE factors; gemma2/gemma3 post-norms, GELU, tied
  // output, sliding windows (gemma2 also soft-caps, gemma3 Q/K norms and
  // local RoPE); chatglm fused QKV + bias and half-rotary; glm4 biases,
  // post-norms and half-rotary.
  std::string arch = "llama";
  bool tied_embeddings = false;  // omit output.weight (gemma: always)
  int head_dim = 0;              // 0: dim / heads
  int sliding_window = 32;       // gemma2/gemma3 local layers
  int sliding_window_pattern = 2;
};

// Parses a --dtype of make-random: any DType name (case-insensitive) or the
// presets q4_k_m / q5_k_m (dtype Q4_K / Q5_K with k_m_mix). False when
// unknown; spec is then unchanged.
bool ParseRandomDType(const std::string& name, RandomModelSpec* spec);

absl::Status WriteRandomModel(const RandomModelSpec& spec,
                              const std::string& out_path);

}  // namespace ckv
