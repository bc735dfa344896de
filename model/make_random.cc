#include "model/make_random.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/arch/arch.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"

namespace ckv {
namespace {

using kernels::DType;

// SplitMix64: small, fast, identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-a, a).
  float Uniform(float a) {
    return static_cast<float>((Next() >> 40) * 0x1.0p-24 * 2.0 - 1.0) * a;
  }

 private:
  uint64_t s_;
};

std::vector<uint8_t> Encode(const std::vector<float>& x, DType t) {
  std::vector<uint8_t> out(kernels::RowBytes(t, x.size()));
  // Rows are whole blocks (ValidateSpec), so the flat array quantises as
  // its rows would.
  kernels::cpu::QuantizeRow(t, x.data(), static_cast<int64_t>(x.size()),
                            out.data());
  return out;
}

void AddRandomMatrix(gguf::GgufWriter& w, Rng& rng, const std::string& name,
                     int64_t rows, int64_t cols, DType t, float scale) {
  std::vector<float> x(rows * cols);
  for (float& v : x) v = rng.Uniform(scale);
  w.AddTensor(name, {cols, rows}, t, Encode(x, t));
}

void AddNorm(gguf::GgufWriter& w, Rng& rng, const std::string& name,
             int64_t n) {
  std::vector<float> x(n);
  for (float& v : x) v = 1.0f + rng.Uniform(0.2f);
  w.AddTensor(name, {n}, DType::kF32, Encode(x, DType::kF32));
}

// Returns the vocabulary size.
int64_t SetByteVocab(gguf::GgufWriter& w, bool chatml) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int64_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);  // byte
  }
  if (chatml) {
    for (const char* t : {"<|im_start|>", "<|im_end|>"}) {
      tokens.push_back(t);
      types.push_back(3);  // control
    }
    w.SetBool("tokenizer.ggml.add_space_prefix", false);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetFloat32Array("tokenizer.ggml.scores",
                    std::vector<double>(tokens.size(), 0.0));
  w.SetStringArray("tokenizer.ggml.tokens", std::move(tokens));
  w.SetInt32Array("tokenizer.ggml.token_type", std::move(types));
  w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
  return n;
}

// Copies every tokenizer.* key of a vocab GGUF; returns the vocab size.
absl::StatusOr<int64_t> CopyVocab(gguf::GgufWriter& w,
                                  const std::string& path) {
  auto vocab = gguf::GgufFile::Open(path);
  if (!vocab.ok()) return vocab.status();
  auto tokens = (*vocab)->GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  for (const auto& [key, value] : (*vocab)->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) w.Set(key, value);
  }
  return static_cast<int64_t>((*tokens)->size());
}

int HeadDim(const RandomModelSpec& s) {
  return s.head_dim > 0 ? s.head_dim : s.dim / s.heads;
}

// The type of attn_v/ffn_down of layer `layer` (>= 0) or of output.weight
// (-1); every other matrix has s.dtype.
DType MatrixType(const RandomModelSpec& s, int layer) {
  if (!s.k_m_mix) return s.dtype;
  if (layer < 0) return DType::kQ6_K;
  const int n = s.layers;
  const bool more_bits =
      layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
  return more_bits ? DType::kQ6_K : s.dtype;
}

absl::Status ValidateSpec(const RandomModelSpec& s) {
  if (s.layers <= 0 || s.dim <= 0 || s.heads <= 0 || s.kv_heads <= 0 ||
      s.ffn <= 0 || s.head_dim < 0 || s.sliding_window <= 0 ||
      s.sliding_window_pattern <= 0) {
    return absl::InvalidArgumentError("all model dimensions must be > 0");
  }
  if ((s.head_dim == 0 && s.dim % s.heads != 0) || s.heads % s.kv_heads != 0 ||
      HeadDim(s) % 4 != 0) {
    return absl::InvalidArgumentError(
        "dim must split into a head_dim that is a multiple of 4; heads must "
        "be a multiple of kv-heads");
  }
  if (FindArch(s.arch) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch must be one of: ", SupportedArchs()));
  }
  if (s.k_m_mix && s.dtype != DType::kQ4_K && s.dtype != DType::kQ5_K) {
    return absl::InvalidArgumentError("the _K_M mix needs Q4_K or Q5_K");
  }
  const int bs = kernels::BlockSize(s.dtype);
  if (bs == 0) return absl::InvalidArgumentError("unknown weight type");
  if (s.dim % bs != 0 || s.ffn % bs != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kernels::DTypeName(s.dtype), " needs dim and ffn multiples of ", bs));
  }
  return absl::OkStatus();
}

void SetHyperParams(gguf::GgufWriter& w, const RandomModelSpec& s) {
  const std::string a = s.arch + ".";
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", absl::StrCat("random-", s.layers, "x", s.dim));
  w.SetUint32(a + "block_count", s.layers);
  w.SetUint32(a + "context_length", s.context_length);
  w.SetUint32(a + "embedding_length", s.dim);
  w.SetUint32(a + "feed_forward_length", s.ffn);
  w.SetUint32(a + "attention.head_count", s.heads);
  w.SetUint32(a + "attention.head_count_kv", s.kv_heads);
  w.SetUint32(a + "attention.key_length", HeadDim(s));
  w.SetUint32(a + "attention.value_length", HeadDim(s));
  // GLM rotates the first half of each head only.
  const bool glm = s.arch == "chatglm" || s.arch == "glm4";
  w.SetUint32(a + "rope.dimension_count", HeadDim(s) / (glm ? 2 : 1));
  w.SetFloat32(a + "rope.freq_base", s.rope_freq_base);
  w.SetFloat32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.arch == "gemma2" || s.arch == "gemma3") {
    w.SetUint32(a + "attention.sliding_window", s.sliding_window);
    w.SetUint32(a + "attention.sliding_window_pattern",
                s.sliding_window_pattern);
  }
  if (s.arch == "gemma2") {
    w.SetFloat32(a + "attn_logit_softcapping", 50.0f);
    w.SetFloat32(a + "final_logit_softcapping", 30.0f);
  }
  if (s.arch == "gemma3") {
    w.SetFloat32(a + "rope.freq_base_swa", 10000.0f);
    w.SetString(a + "rope.scaling.type", "linear");
    w.SetFloat32(a + "rope.scaling.factor", 8.0f);
  }
  if (s.arch == "phi3") {
    w.SetString(a + "rope.scaling.type", "longrope");
    w.SetFloat32(a + "rope.scaling.attn_factor", 1.19f);
    w.SetUint32(a + "rope.scaling.original_context_length", 4096);
  }
}

// Phi-3 LongRoPE factors: short near 1, long growing with the dimension.
void AddLongRopeFactors(gguf::GgufWriter& w, int64_t half) {
  std::vector<float> shrt(half), lng(half);
  for (int64_t i = 0; i < half; ++i) {
    shrt[i] = 1.0f + 0.05f * i / half;
    lng[i] = 1.0f + 20.0f * i / half;
  }
  w.AddTensor("rope_factors_short.weight", {half}, DType::kF32,
              Encode(shrt, DType::kF32));
  w.AddTensor("rope_factors_long.weight", {half}, DType::kF32,
              Encode(lng, DType::kF32));
}

void AddBias(gguf::GgufWriter& w, Rng& rng, const std::string& name,
             int64_t n) {
  std::vector<float> x(n);
  for (float& v : x) v = rng.Uniform(0.5f);
  w.AddTensor(name, {n}, DType::kF32, Encode(x, DType::kF32));
}

// The tensors of block l, laid out as the arch table says.
void AddLayer(gguf::GgufWriter& w, Rng& rng, const RandomModelSpec& s, int l) {
  const ArchTraits& a = *FindArch(s.arch);
  const std::string p = absl::StrCat("blk.", l, ".");
  const int64_t d = s.dim, hd = HeadDim(s), q = s.heads * hd,
                kv = s.kv_heads * hd, ff = s.ffn;
  const float in_d = std::sqrt(3.0f / d), in_q = std::sqrt(3.0f / q),
              in_ff = std::sqrt(3.0f / ff);
  const bool bias =
      s.arch == "qwen2" || s.arch == "chatglm" || s.arch == "glm4";
  AddNorm(w, rng, p + "attn_norm.weight", d);
  if (a.fused_qkv) {
    AddRandomMatrix(w, rng, p + "attn_qkv.weight", q + 2 * kv, d, s.dtype,
                    in_d);
    if (bias) AddBias(w, rng, p + "attn_qkv.bias", q + 2 * kv);
  } else {
    AddRandomMatrix(w, rng, p + "attn_q.weight", q, d, s.dtype, in_d);
    AddRandomMatrix(w, rng, p + "attn_k.weight", kv, d, s.dtype, in_d);
    AddRandomMatrix(w, rng, p + "attn_v.weight", kv, d, MatrixType(s, l), in_d);
    if (bias) {
      AddBias(w, rng, p + "attn_q.bias", q);
      AddBias(w, rng, p + "attn_k.bias", kv);
      AddBias(w, rng, p + "attn_v.bias", kv);
    }
  }
  if (a.qk_norm) {
    AddNorm(w, rng, p + "attn_q_norm.weight", hd);
    AddNorm(w, rng, p + "attn_k_norm.weight", hd);
  }
  AddRandomMatrix(w, rng, p + "attn_output.weight", d, q, s.dtype, in_q);
  if (a.post_norms) AddNorm(w, rng, p + "post_attention_norm.weight", d);
  AddNorm(w, rng, p + "ffn_norm.weight", d);
  if (a.fused_gate_up) {
    AddRandomMatrix(w, rng, p + "ffn_up.weight", 2 * ff, d, s.dtype, in_d);
  } else {
    AddRandomMatrix(w, rng, p + "ffn_gate.weight", ff, d, s.dtype, in_d);
    AddRandomMatrix(w, rng, p + "ffn_up.weight", ff, d, s.dtype, in_d);
  }
  AddRandomMatrix(w, rng, p + "ffn_down.weight", d, ff, MatrixType(s, l),
                  in_ff);
  if (a.post_norms) AddNorm(w, rng, p + "post_ffw_norm.weight", d);
}

}  // namespace

bool ParseRandomDType(const std::string& name, RandomModelSpec* spec) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(c));
  if (lower == "q4_k_m" || lower == "q5_k_m") {
    spec->dtype = lower == "q4_k_m" ? DType::kQ4_K : DType::kQ5_K;
    spec->k_m_mix = true;
    return true;
  }
  DType t;
  if (!kernels::ParseDTypeName(name.c_str(), &t)) return false;
  spec->dtype = t;
  spec->k_m_mix = false;
  return true;
}

absl::Status WriteRandomModel(const RandomModelSpec& s,
                              const std::string& out_path) {
  if (auto st = ValidateSpec(s); !st.ok()) return st;
  gguf::GgufWriter w;
  SetHyperParams(w, s);
  int64_t vocab = 0;
  if (s.vocab == "byte" || s.vocab == "byte-chatml") {
    vocab = SetByteVocab(w, s.vocab == "byte-chatml");
  } else {
    auto n = CopyVocab(w, s.vocab);
    if (!n.ok()) return n.status();
    vocab = *n;
  }
  if (!s.chat_template.empty()) {
    w.SetString("tokenizer.chat_template", s.chat_template);
  }
  Rng rng(s.seed);
  const int64_t d = s.dim, hd = HeadDim(s);
  const float in_d = std::sqrt(3.0f / d);
  AddRandomMatrix(w, rng, "token_embd.weight", vocab, d, s.dtype, 1.0f);
  for (int l = 0; l < s.layers; ++l) AddLayer(w, rng, s, l);
  AddNorm(w, rng, "output_norm.weight", d);
  if (!s.tied_embeddings && !FindArch(s.arch)->scale_embeddings) {
    AddRandomMatrix(w, rng, "output.weight", vocab, d, MatrixType(s, -1),
                    in_d * 4.0f);
  }
  if (s.arch == "phi3") AddLongRopeFactors(w, hd / 2);
  if (s.rope_freqs) {
    std::vector<float> f(hd / 2);
    for (int i = 0; i < hd / 2; ++i) f[i] = 1.0f + 7.0f * i / (hd / 2);
    w.AddTensor("rope_freqs.weight", {hd / 2}, DType::kF32,
                Encode(f, DType::kF32));
  }
  return w.WriteFile(out_path);
}

}  // namespace ckv
