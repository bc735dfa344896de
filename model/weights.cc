#include "model/weights.h"

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
  kernels::cpu::ref::DequantizeRow(info.type, info.data, n, out.data());
  return out;
}

// Binds `*dst = BindX(...)` and returns on error.
#define CKV_BIND(dst, expr)            \
  do {                                 \
    auto bound_ = (expr);              \
    if (!bound_.ok()) return bound_.status(); \
    dst = *std::move(bound_);          \
  } while (0)

absl::Status BindLayer(const gguf::GgufFile& f, const ModelConfig& c, int i,
                       LayerWeights& l) {
  const std::string p = absl::StrCat("blk.", i, ".");
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.ffn_dim;
  CKV_BIND(l.attn_norm, BindVector(f, p + "attn_norm.weight", d));
  CKV_BIND(l.wq, BindMatrix(f, p + "attn_q.weight", q, d));
  CKV_BIND(l.wk, BindMatrix(f, p + "attn_k.weight", kv, d));
  CKV_BIND(l.wv, BindMatrix(f, p + "attn_v.weight", kv, d));
  CKV_BIND(l.wo, BindMatrix(f, p + "attn_output.weight", d, q));
  if (c.qkv_bias) {
    CKV_BIND(l.bq, BindVector(f, p + "attn_q.bias", q));
    CKV_BIND(l.bk, BindVector(f, p + "attn_k.bias", kv));
    CKV_BIND(l.bv, BindVector(f, p + "attn_v.bias", kv));
  }
  CKV_BIND(l.ffn_norm, BindVector(f, p + "ffn_norm.weight", d));
  CKV_BIND(l.w_gate, BindMatrix(f, p + "ffn_gate.weight", ff, d));
  CKV_BIND(l.w_up, BindMatrix(f, p + "ffn_up.weight", ff, d));
  CKV_BIND(l.w_down, BindMatrix(f, p + "ffn_down.weight", d, ff));
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
    CKV_BIND(w.rope_freqs, BindVector(f, "rope_freqs.weight", c.rope_dims / 2));
  }
  w.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    if (auto s = BindLayer(f, c, i, w.layers[i]); !s.ok()) return s;
  }
  return w;
}

#undef CKV_BIND

}  // namespace ckv
