#include "model/weights.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"

namespace ckv {
namespace {

absl::StatusOr<const gguf::TensorInfo*> Find(const gguf::GgufFile& f,
                                             const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model is missing tensor '", name, "'"));
  }
  return t;
}

absl::Status BadShape(const std::string& name, int64_t want_rows,
                      int64_t want_cols) {
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", name, "' must have shape [", want_cols, ", ",
                   want_rows, "] (GGUF order)"));
}

absl::StatusOr<Matrix> BindMatrix(const gguf::GgufFile& f,
                                  const std::string& name, int64_t rows,
                                  int64_t cols) {
  auto t = Find(f, name);
  if (!t.ok()) return t.status();
  const gguf::TensorInfo& info = **t;
  if (info.dims.size() != 2 || info.dims[0] != cols || info.dims[1] != rows) {
    return BadShape(name, rows, cols);
  }
  return Matrix{info.type, info.data, rows, cols};
}

absl::StatusOr<std::vector<float>> BindVector(const gguf::GgufFile& f,
                                              const std::string& name,
                                              int64_t n) {
  auto t = Find(f, name);
  if (!t.ok()) return t.status();
  const gguf::TensorInfo& info = **t;
  if (info.n_elements != n || info.dims[0] != n) return BadShape(name, 1, n);
  if (kernels::RowBytes(info.type, n) < 0) return BadShape(name, 1, n);
  std::vector<float> out(n);
  kernels::ref::DequantizeRow(info.type, info.data, n, out.data());
  return out;
}

// Rows [first, first + n) of m.
Matrix RowRange(const Matrix& m, int64_t first, int64_t n) {
  Matrix r = m;
  r.data = static_cast<const uint8_t*>(m.data) +
           first * kernels::RowBytes(m.type, m.cols);
  r.rows = n;
  return r;
}

// Binds `*dst = BindX(...)` and returns on error.
#define CKV_BIND(dst, expr)            \
  do {                                 \
    auto bound_ = (expr);              \
    if (!bound_.ok()) return bound_.status(); \
    dst = *std::move(bound_);          \
  } while (0)

absl::Status BindAttention(const gguf::GgufFile& f, const ModelConfig& c,
                           const std::string& p, LayerWeights& l) {
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim();
  if (c.fused_qkv) {
    Matrix qkv;
    CKV_BIND(qkv, BindMatrix(f, p + "attn_qkv.weight", q + 2 * kv, d));
    l.wq = RowRange(qkv, 0, q);
    l.wk = RowRange(qkv, q, kv);
    l.wv = RowRange(qkv, q + kv, kv);
    if (c.qkv_bias) {
      std::vector<float> b;
      CKV_BIND(b, BindVector(f, p + "attn_qkv.bias", q + 2 * kv));
      l.bq.assign(b.begin(), b.begin() + q);
      l.bk.assign(b.begin() + q, b.begin() + q + kv);
      l.bv.assign(b.begin() + q + kv, b.end());
    }
  } else {
    CKV_BIND(l.wq, BindMatrix(f, p + "attn_q.weight", q, d));
    CKV_BIND(l.wk, BindMatrix(f, p + "attn_k.weight", kv, d));
    CKV_BIND(l.wv, BindMatrix(f, p + "attn_v.weight", kv, d));
    if (c.qkv_bias) {
      CKV_BIND(l.bq, BindVector(f, p + "attn_q.bias", q));
      CKV_BIND(l.bk, BindVector(f, p + "attn_k.bias", kv));
      CKV_BIND(l.bv, BindVector(f, p + "attn_v.bias", kv));
    }
  }
  CKV_BIND(l.wo, BindMatrix(f, p + "attn_output.weight", d, q));
  if (c.qk_norm) {
    CKV_BIND(l.q_norm, BindVector(f, p + "attn_q_norm.weight", c.head_dim));
    CKV_BIND(l.k_norm, BindVector(f, p + "attn_k_norm.weight", c.head_dim));
  }
  return absl::OkStatus();
}

absl::Status BindLayer(const gguf::GgufFile& f, const ModelConfig& c, int i,
                       LayerWeights& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  const int64_t d = c.d_model, ff = c.ffn_dim;
  CKV_BIND(l.attn_norm, BindVector(f, p + "attn_norm.weight", d));
  if (auto s = BindAttention(f, c, p, l); !s.ok()) return s;
  CKV_BIND(l.ffn_norm, BindVector(f, p + "ffn_norm.weight", d));
  if (c.fused_gate_up) {
    Matrix gate_up;
    CKV_BIND(gate_up, BindMatrix(f, p + "ffn_up.weight", 2 * ff, d));
    l.w_gate = RowRange(gate_up, 0, ff);
    l.w_up = RowRange(gate_up, ff, ff);
  } else {
    CKV_BIND(l.w_gate, BindMatrix(f, p + "ffn_gate.weight", ff, d));
    CKV_BIND(l.w_up, BindMatrix(f, p + "ffn_up.weight", ff, d));
  }
  CKV_BIND(l.w_down, BindMatrix(f, p + "ffn_down.weight", d, ff));
  if (c.post_norms) {
    CKV_BIND(l.post_attn_norm,
             BindVector(f, p + "post_attention_norm.weight", d));
    CKV_BIND(l.post_ffn_norm, BindVector(f, p + "post_ffw_norm.weight", d));
  }
  return absl::OkStatus();
}

int64_t Bytes(const Matrix& m) { return kernels::RowBytes(m.type, m.cols) * m.rows; }

}  // namespace

int64_t ModelWeights::MatrixBytes() const {
  int64_t n = Bytes(output);
  for (const auto& l : layers) {
    n += Bytes(l.wq) + Bytes(l.wk) + Bytes(l.wv) + Bytes(l.wo) +
         Bytes(l.w_gate) + Bytes(l.w_up) + Bytes(l.w_down);
  }
  return n;
}

absl::StatusOr<ModelWeights> LoadWeights(const gguf::GgufFile& f,
                                         const ModelConfig& c) {
  ModelWeights w;
  CKV_BIND(w.token_embd,
           BindMatrix(f, "token_embd.weight", c.vocab_size, c.d_model));
  CKV_BIND(w.output_norm, BindVector(f, "output_norm.weight", c.d_model));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    CKV_BIND(w.output, BindMatrix(f, "output.weight", c.vocab_size, c.d_model));
  }
  if (c.has_rope_freqs) {
    const char* name = f.FindTensor("rope_freqs.weight") != nullptr
                           ? "rope_freqs.weight"
                           : "rope_factors_short.weight";
    CKV_BIND(w.rope_freqs, BindVector(f, name, c.rope_dims / 2));
  }
  if (c.has_rope_long_factors) {
    CKV_BIND(w.rope_freqs_long,
             BindVector(f, "rope_factors_long.weight", c.rope_dims / 2));
  }
  for (const auto* factors : {&w.rope_freqs, &w.rope_freqs_long}) {
    for (float x : *factors) {
      if (!(x > 0.0f) || !std::isfinite(x)) {
        return absl::InvalidArgumentError("RoPE frequency factors must be > 0");
      }
    }
  }
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    if (auto s = BindLayer(f, c, i, w.layers[i]); !s.ok()) return s;
  }
  return w;
}

#undef CKV_BIND

}  // namespace ckv
