#include "model/model_config.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ckv {
namespace {

absl::Status Invalid(absl::string_view msg) {
  return absl::InvalidArgumentError(msg);
}

// Reads `<arch>.<suffix>` as a positive int into *out.
absl::Status ReadPositive(const gguf::GgufFile& f, const std::string& arch,
                          absl::string_view suffix, int* out) {
  const std::string key = absl::StrCat(arch, ".", suffix);
  auto v = f.GetInt(key);
  if (!v.ok()) {
    return Invalid(absl::StrCat("unsupported model: ", v.status().message()));
  }
  if (*v <= 0 || *v > (int64_t{1} << 30)) {
    return Invalid(absl::StrCat("model key '", key, "' out of range: ", *v));
  }
  *out = static_cast<int>(*v);
  return absl::OkStatus();
}

int OptionalInt(const gguf::GgufFile& f, const std::string& key, int dflt) {
  auto v = f.GetInt(key);
  return v.ok() ? static_cast<int>(*v) : dflt;
}

float OptionalFloat(const gguf::GgufFile& f, const std::string& key,
                    float dflt) {
  auto v = f.GetFloat(key);
  return v.ok() ? static_cast<float>(*v) : dflt;
}

absl::Status ReadShape(const gguf::GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  if (auto s = ReadPositive(f, a, "block_count", &c.n_layers); !s.ok()) return s;
  if (auto s = ReadPositive(f, a, "embedding_length", &c.d_model); !s.ok()) {
    return s;
  }
  if (auto s = ReadPositive(f, a, "feed_forward_length", &c.ffn_dim); !s.ok()) {
    return s;
  }
  if (auto s = ReadPositive(f, a, "attention.head_count", &c.n_heads);
      !s.ok()) {
    return s;
  }
  c.n_kv_heads = OptionalInt(f, a + ".attention.head_count_kv", c.n_heads);
  c.context_length = OptionalInt(f, a + ".context_length", 4096);
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0) {
    return Invalid(absl::StrCat("head_count ", c.n_heads,
                                " is not a multiple of head_count_kv ",
                                c.n_kv_heads));
  }
  // head_dim defaults to d_model / n_heads; key_length may set another.
  if (!f.Has(a + ".attention.key_length") && c.d_model % c.n_heads != 0) {
    return Invalid("embedding_length is not a multiple of head_count");
  }
  c.head_dim = OptionalInt(f, a + ".attention.key_length",
                           c.d_model / c.n_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 ||
      OptionalInt(f, a + ".attention.value_length", c.head_dim) != c.head_dim) {
    return Invalid("unsupported head dimension (need even, K == V length)");
  }
  return absl::OkStatus();
}

absl::Status ReadRope(const gguf::GgufFile& f, ModelConfig& c) {
  const std::string& a = c.arch;
  c.rope_dims = OptionalInt(f, a + ".rope.dimension_count", c.head_dim);
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return Invalid("rope.dimension_count out of range");
  }
  c.rope_freq_base = OptionalFloat(f, a + ".rope.freq_base", 10000.0f);
  auto type = f.GetString(a + ".rope.scaling.type");
  if (type.ok() && *type != "none" && *type != "linear" && *type != "llama3" &&
      *type != "longrope") {
    return Invalid(absl::StrCat("unsupported rope.scaling.type '", *type, "'"));
  }
  c.rope_attn_factor = OptionalFloat(f, a + ".rope.scaling.attn_factor", 1.0f);
  if (!(c.rope_attn_factor > 0.0f)) {
    return Invalid("rope.scaling.attn_factor must be > 0");
  }
  c.rope_orig_context = OptionalInt(
      f, a + ".rope.scaling.original_context_length", c.context_length);
  float factor = OptionalFloat(f, a + ".rope.scale_linear", 1.0f);
  if (type.ok() && *type == "linear") {
    factor = OptionalFloat(f, a + ".rope.scaling.factor", 1.0f);
  }
  if (!(factor > 0.0f)) return Invalid("rope scaling factor must be > 0");
  c.rope_freq_scale = 1.0f / factor;
  if (!(c.rope_freq_base > 0.0f)) return Invalid("rope.freq_base must be > 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ReadModelConfig(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) {
    return Invalid(absl::StrCat("unsupported model: ", arch.status().message()));
  }
  c.arch = *arch;
  const ArchTraits* traits = FindArch(c.arch);
  if (traits == nullptr) {
    return Invalid(absl::StrCat("unsupported architecture '", c.arch,
                                "' (supported: ", SupportedArchs(), ")"));
  }
  c.rope_style = traits->rope_style;
  c.ffn_act = traits->ffn;
  c.fused_qkv = traits->fused_qkv;
  c.fused_gate_up = traits->fused_gate_up;
  c.qk_norm = traits->qk_norm;
  c.post_norms = traits->post_norms;
  if (auto n = f.GetString("general.name"); n.ok()) c.name = *n;
  if (auto s = ReadShape(f, c); !s.ok()) return s;
  if (auto s = ReadRope(f, c); !s.ok()) return s;
  c.rms_eps =
      OptionalFloat(f, c.arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (!(c.rms_eps > 0.0f)) return Invalid("layer_norm_rms_epsilon must be > 0");
  c.embed_scale =
      traits->scale_embeddings ? std::sqrt(static_cast<float>(c.d_model)) : 1;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (auto s = ReadArchExtras(f, c); !s.ok()) return s;
  c.qkv_bias = f.FindTensor(c.fused_qkv ? "blk.0.attn_qkv.bias"
                                        : "blk.0.attn_q.bias") != nullptr;
  c.has_rope_freqs = f.FindTensor("rope_freqs.weight") != nullptr ||
                     f.FindTensor("rope_factors_short.weight") != nullptr;
  c.has_rope_long_factors = f.FindTensor("rope_factors_long.weight") != nullptr;
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return Invalid("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2 || embd->dims[0] != c.d_model) {
    return Invalid("token_embd.weight shape does not match embedding_length");
  }
  c.vocab_size = static_cast<int>(embd->dims[1]);
  return c;
}

std::string ModelInfoJson(const ModelConfig& c, const gguf::GgufFile& file) {
  std::map<std::string, int> type_counts;
  for (const auto& t : file.tensors()) ++type_counts[kernels::DTypeName(t.type)];
  nlohmann::ordered_json j;
  j["architecture"] = c.arch;
  j["name"] = c.name;
  j["layers"] = c.n_layers;
  j["dim"] = c.d_model;
  j["heads"] = c.n_heads;
  j["kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["ffn"] = c.ffn_dim;
  j["vocab_size"] = c.vocab_size;
  j["context_length"] = c.context_length;
  j["rms_eps"] = c.rms_eps;
  j["tensor_types"] = type_counts;
  j["rope"] = {{"style", c.rope_style == RopeStyle::kNeox ? "neox" : "normal"},
               {"dims", c.rope_dims},
               {"freq_base", c.rope_freq_base},
               {"freq_scale", c.rope_freq_scale},
               {"freq_factors", c.has_rope_freqs},
               {"long_factors", c.has_rope_long_factors},
               {"attn_factor", c.rope_attn_factor}};
  if (c.sliding_window > 0) {
    j["sliding_window"] = {{"window", c.sliding_window},
                           {"pattern", c.sliding_window_pattern},
                           {"local_freq_base", c.rope_freq_base_local},
                           {"local_freq_scale", c.rope_freq_scale_local}};
  }
  j["attn_scale"] = c.attn_scale;
  j["attn_softcap"] = c.attn_softcap;
  j["final_softcap"] = c.final_softcap;
  j["embed_scale"] = c.embed_scale;
  j["qkv_bias"] = c.qkv_bias;
  j["tied_embeddings"] = c.tied_embeddings;
  j["gguf_version"] = file.version();
  return j.dump(2);
}

}  // namespace ckv
