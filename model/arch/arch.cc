#include "model/arch/arch.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/model_config.h"

namespace ckv {
namespace {

using FA = FfnActivation;
using RS = RopeStyle;

// name, rope, ffn, fused_qkv, fused_gate_up, qk_norm, post_norms, scale_embd
constexpr ArchTraits kArchs[] = {
    {"llama", RS::kNormal, FA::kSiluGate, false, false, false, false, false},
    {"qwen2", RS::kNeox, FA::kSiluGate, false, false, false, false, false},
    {"qwen3", RS::kNeox, FA::kSiluGate, false, false, true, false, false},
    {"phi3", RS::kNeox, FA::kSiluGate, true, true, false, false, false},
    {"gemma2", RS::kNeox, FA::kGeluTanhGate, false, false, false, true, true},
    {"gemma3", RS::kNeox, FA::kGeluTanhGate, false, false, true, true, true},
    {"chatglm", RS::kNormal, FA::kSiluGate, true, true, false, false, false},
    {"glm4", RS::kNormal, FA::kSiluGate, false, true, false, true, false},
};

absl::Status Invalid(absl::string_view msg) {
  return absl::InvalidArgumentError(msg);
}

// Reads `<arch>.<suffix>` when present; INVALID_ARGUMENT unless > 0.
absl::Status PositiveFloat(const gguf::GgufFile& f, const ModelConfig& c,
                           absl::string_view suffix, float* out) {
  const std::string key = absl::StrCat(c.arch, ".", suffix);
  if (!f.Has(key)) return absl::OkStatus();
  auto v = f.GetFloat(key);
  if (!v.ok() || !(*v > 0.0) || !std::isfinite(*v)) {
    return Invalid(absl::StrCat("model key '", key, "' must be a number > 0"));
  }
  *out = static_cast<float>(*v);
  return absl::OkStatus();
}

absl::Status PositiveInt(const gguf::GgufFile& f, const ModelConfig& c,
                         absl::string_view suffix, int* out) {
  const std::string key = absl::StrCat(c.arch, ".", suffix);
  if (!f.Has(key)) return absl::OkStatus();
  auto v = f.GetInt(key);
  if (!v.ok() || *v <= 0 || *v > (int64_t{1} << 30)) {
    return Invalid(absl::StrCat("model key '", key, "' must be an int > 0"));
  }
  *out = static_cast<int>(*v);
  return absl::OkStatus();
}

// The query scale of Gemma's 27B models is 1/sqrt(d_model / n_heads)
// (query_pre_attn_scalar); the others use 1/sqrt(head_dim). The 27B models
// are recognised by their layer count, as llama.cpp does.
void GemmaQueryScale(ModelConfig& c, int layers_of_27b) {
  if (c.n_layers == layers_of_27b) {
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.d_model) / c.n_heads);
  }
}

absl::Status ReadGemma2(const gguf::GgufFile& f, ModelConfig& c) {
  c.sliding_window = 4096;
  c.sliding_window_pattern = 2;
  c.attn_softcap = 50.0f;
  c.final_softcap = 30.0f;
  GemmaQueryScale(c, 46);
  if (auto s = PositiveInt(f, c, "attention.sliding_window", &c.sliding_window);
      !s.ok()) {
    return s;
  }
  if (auto s = PositiveInt(f, c, "attention.sliding_window_pattern",
                           &c.sliding_window_pattern);
      !s.ok()) {
    return s;
  }
  if (auto s = PositiveFloat(f, c, "attn_logit_softcapping", &c.attn_softcap);
      !s.ok()) {
    return s;
  }
  return PositiveFloat(f, c, "final_logit_softcapping", &c.final_softcap);
}

// Gemma-3: sliding windows only when the file names a window; local layers
// use rope.freq_base_swa (default 1e4) and no RoPE scaling.
absl::Status ReadGemma3(const gguf::GgufFile& f, ModelConfig& c) {
  GemmaQueryScale(c, 62);
  if (auto s = PositiveInt(f, c, "attention.sliding_window", &c.sliding_window);
      !s.ok()) {
    return s;
  }
  c.sliding_window_pattern = 6;
  if (auto s = PositiveInt(f, c, "attention.sliding_window_pattern",
                           &c.sliding_window_pattern);
      !s.ok()) {
    return s;
  }
  c.rope_freq_base_local = 10000.0f;
  c.rope_freq_scale_local = 1.0f;
  return PositiveFloat(f, c, "rope.freq_base_swa", &c.rope_freq_base_local);
}

}  // namespace

const ArchTraits* FindArch(absl::string_view name) {
  for (const ArchTraits& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string SupportedArchs() {
  std::string out;
  for (const ArchTraits& a : kArchs) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", a.name);
  }
  return out;
}

absl::Status ReadArchExtras(const gguf::GgufFile& f, ModelConfig& c) {
  c.rope_freq_base_local = c.rope_freq_base;
  c.rope_freq_scale_local = c.rope_freq_scale;
  // Phi-3 files carry attention.sliding_window, but llama.cpp (the
  // reference) ignores it, and so does this engine.
  if (c.arch == "gemma2") return ReadGemma2(f, c);
  if (c.arch == "gemma3") return ReadGemma3(f, c);
  return absl::OkStatus();
}

}  // namespace ckv
