// Every architecture of the arch table on make-random models: the engine
// against a plain double-precision forward written from the architectures'
// definitions (reading the file's tensors itself, fused layouts included),
// and the invariant that a clustered store whose budget covers every token
// gives the dense results.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/ref/ops.h"
#include "model/gguf/gguf_writer.h"
#include "model/kv/clustered_store.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tests/model/arch_specs.h"
#include "tests/model/test_util.h"

namespace ckv {
namespace {

using kernels::DType;
using Vec = std::vector<double>;

const std::vector<std::string> kArchNames = testing::EngineArchs();

RandomModelSpec SpecFor(const std::string& arch) {
  return testing::TinyArchSpec(arch, DType::kF32);
}

std::unique_ptr<Model> Load(const std::string& arch) {
  auto m = LoadModel(testing::RandomModelPath("arch_" + arch, SpecFor(arch)));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 5) % vocab;
  return t;
}

// ------------------------------------------------ the reference forward

// A file tensor as doubles, rows of `cols` elements.
Vec Tensor(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> x(t->n_elements);
  kernels::ref::DequantizeRow(t->type, t->data, t->n_elements, x.data());
  return Vec(x.begin(), x.end());
}

bool HasTensor(const gguf::GgufFile& f, const std::string& name) {
  return f.FindTensor(name) != nullptr;
}

// y = W x for W [n_out][n_in] starting at row `first`.
Vec MatVec(const Vec& w, int64_t first, int64_t n_out, const Vec& x) {
  const int64_t n_in = x.size();
  Vec y(n_out, 0.0);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t i = 0; i < n_in; ++i) y[o] += w[(first + o) * n_in + i] * x[i];
  }
  return y;
}

// RMS norm of x[off, off + n) with weight w.
void RmsNorm(Vec& x, int64_t off, int64_t n, const Vec& w, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double inv = 1.0 / std::sqrt(ss / n + eps);
  for (int64_t i = 0; i < n; ++i) x[off + i] *= inv * w[i];
}

// Rotates one head (hd values at v) for position pos.
void RopeHead(double* v, int64_t pos, const ModelConfig& c, bool local,
              const Vec& factors) {
  const double base = local ? c.rope_freq_base_local : c.rope_freq_base;
  const double scale = local ? c.rope_freq_scale_local : c.rope_freq_scale;
  const int n = c.rope_dims, half = n / 2;
  for (int i = 0; i < half; ++i) {
    double theta = pos * scale * std::pow(base, -2.0 * i / n);
    if (!factors.empty()) theta /= factors[i];
    const bool neox = c.rope_style == RopeStyle::kNeox;
    double& a = v[neox ? i : 2 * i];
    double& b = v[neox ? i + half : 2 * i + 1];
    const double cs = std::cos(theta) * c.rope_attn_factor;
    const double sn = std::sin(theta) * c.rope_attn_factor;
    const double a0 = a, b0 = b;
    a = a0 * cs - b0 * sn;
    b = a0 * sn + b0 * cs;
  }
}

struct RefLayer {
  Vec q, k, v;  // [tokens][heads][hd] after norms and RoPE
};

// Q, K, V of every token of layer l (xn: normed input rows).
RefLayer Project(const gguf::GgufFile& f, const ModelConfig& c, int l,
                 const std::vector<Vec>& xn, const Vec& factors) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int hd = c.head_dim, q = c.q_dim(), kv = c.kv_dim();
  const bool fused = HasTensor(f, p + "attn_qkv.weight");
  const Vec w = fused ? Tensor(f, p + "attn_qkv.weight") : Vec{};
  const Vec wq = fused ? w : Tensor(f, p + "attn_q.weight");
  const Vec wk = fused ? w : Tensor(f, p + "attn_k.weight");
  const Vec wv = fused ? w : Tensor(f, p + "attn_v.weight");
  Vec bias(q + 2 * kv, 0.0);
  if (HasTensor(f, p + "attn_qkv.bias")) bias = Tensor(f, p + "attn_qkv.bias");
  if (HasTensor(f, p + "attn_q.bias")) {
    const Vec bq = Tensor(f, p + "attn_q.bias"),
              bk = Tensor(f, p + "attn_k.bias"),
              bv = Tensor(f, p + "attn_v.bias");
    std::copy(bq.begin(), bq.end(), bias.begin());
    std::copy(bk.begin(), bk.end(), bias.begin() + q);
    std::copy(bv.begin(), bv.end(), bias.begin() + q + kv);
  }
  const bool qk_norm = HasTensor(f, p + "attn_q_norm.weight");
  const Vec qn = qk_norm ? Tensor(f, p + "attn_q_norm.weight") : Vec{};
  const Vec kn = qk_norm ? Tensor(f, p + "attn_k_norm.weight") : Vec{};
  RefLayer r;
  for (size_t t = 0; t < xn.size(); ++t) {
    Vec qt = MatVec(wq, 0, q, xn[t]);
    Vec kt = MatVec(wk, fused ? q : 0, kv, xn[t]);
    Vec vt = MatVec(wv, fused ? q + kv : 0, kv, xn[t]);
    for (int i = 0; i < q; ++i) qt[i] += bias[i];
    for (int i = 0; i < kv; ++i) kt[i] += bias[q + i];
    for (int i = 0; i < kv; ++i) vt[i] += bias[q + kv + i];
    for (int h = 0; h < c.n_heads; ++h) {
      if (qk_norm) RmsNorm(qt, h * hd, hd, qn, c.rms_eps);
      RopeHead(&qt[h * hd], t, c, c.IsLocalLayer(l), factors);
    }
    for (int h = 0; h < c.n_kv_heads; ++h) {
      if (qk_norm) RmsNorm(kt, h * hd, hd, kn, c.rms_eps);
      RopeHead(&kt[h * hd], t, c, c.IsLocalLayer(l), factors);
    }
    r.q.insert(r.q.end(), qt.begin(), qt.end());
    r.k.insert(r.k.end(), kt.begin(), kt.end());
    r.v.insert(r.v.end(), vt.begin(), vt.end());
  }
  return r;
}

// Attention output row of token t: causal, windowed, soft-capped.
Vec Attend(const ModelConfig& c, int l, const RefLayer& r, int64_t t) {
  const int hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  const int64_t window = c.LayerWindow(l);
  Vec out(c.q_dim(), 0.0);
  for (int h = 0; h < c.n_heads; ++h) {
    const int g = h / group;
    Vec s;
    const int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
    for (int64_t k = first; k <= t; ++k) {
      double dot = 0.0;
      for (int d = 0; d < hd; ++d) {
        dot += r.q[(t * c.n_heads + h) * hd + d] *
               r.k[(k * c.n_kv_heads + g) * hd + d];
      }
      dot *= c.attn_scale;
      if (c.attn_softcap > 0)
        dot = c.attn_softcap * std::tanh(dot / c.attn_softcap);
      s.push_back(dot);
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int64_t k = first; k <= t; ++k) {
      for (int d = 0; d < hd; ++d) {
        out[h * hd + d] +=
            s[k - first] / sum * r.v[(k * c.n_kv_heads + g) * hd + d];
      }
    }
  }
  return out;
}

double Act(const ModelConfig& c, double g) {
  if (c.ffn_act == FfnActivation::kGeluTanhGate) {
    return 0.5 * g *
           (1.0 +
            std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
  }
  return g / (1.0 + std::exp(-g));
}

Vec Ffn(const gguf::GgufFile& f, const ModelConfig& c, int l, const Vec& xn) {
  const std::string p = "blk." + std::to_string(l) + ".";
  const int ff = c.ffn_dim;
  Vec gate, up;
  if (HasTensor(f, p + "ffn_gate.weight")) {
    gate = MatVec(Tensor(f, p + "ffn_gate.weight"), 0, ff, xn);
    up = MatVec(Tensor(f, p + "ffn_up.weight"), 0, ff, xn);
  } else {  // ffn_up = [gate; up]
    const Vec w = Tensor(f, p + "ffn_up.weight");
    gate = MatVec(w, 0, ff, xn);
    up = MatVec(w, ff, ff, xn);
  }
  for (int i = 0; i < ff; ++i) gate[i] = Act(c, gate[i]) * up[i];
  return MatVec(Tensor(f, p + "ffn_down.weight"), 0, c.d_model, gate);
}

// Logits of every position, [tokens][vocab].
std::vector<Vec> ReferenceLogits(const Model& m,
                                 const std::vector<int32_t>& tokens,
                                 bool long_rope_factors = false) {
  const gguf::GgufFile& f = *m.file;
  const ModelConfig& c = m.config;
  const int d = c.d_model;
  const int64_t n = tokens.size();
  Vec factors;
  const char* factor_name = long_rope_factors ? "rope_factors_long.weight"
                                              : "rope_factors_short.weight";
  if (HasTensor(f, factor_name)) factors = Tensor(f, factor_name);
  const Vec embd = Tensor(f, "token_embd.weight");
  std::vector<Vec> x(n);
  for (int64_t t = 0; t < n; ++t) {
    x[t].assign(embd.begin() + int64_t{tokens[t]} * d,
                embd.begin() + int64_t{tokens[t] + 1} * d);
    for (double& v : x[t]) v *= c.embed_scale;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool post = HasTensor(f, p + "post_attention_norm.weight");
    std::vector<Vec> xn = x;
    for (Vec& r : xn)
      RmsNorm(r, 0, d, Tensor(f, p + "attn_norm.weight"), c.rms_eps);
    const RefLayer r = Project(f, c, l, xn, factors);
    const Vec wo = Tensor(f, p + "attn_output.weight");
    for (int64_t t = 0; t < n; ++t) {
      Vec o = MatVec(wo, 0, d, Attend(c, l, r, t));
      if (post)
        RmsNorm(o, 0, d, Tensor(f, p + "post_attention_norm.weight"),
                c.rms_eps);
      for (int i = 0; i < d; ++i) x[t][i] += o[i];
    }
    for (int64_t t = 0; t < n; ++t) {
      Vec h = x[t];
      RmsNorm(h, 0, d, Tensor(f, p + "ffn_norm.weight"), c.rms_eps);
      Vec o = Ffn(f, c, l, h);
      if (post)
        RmsNorm(o, 0, d, Tensor(f, p + "post_ffw_norm.weight"), c.rms_eps);
      for (int i = 0; i < d; ++i) x[t][i] += o[i];
    }
  }
  const Vec out =
      HasTensor(f, "output.weight") ? Tensor(f, "output.weight") : embd;
  std::vector<Vec> logits;
  for (int64_t t = 0; t < n; ++t) {
    RmsNorm(x[t], 0, d, Tensor(f, "output_norm.weight"), c.rms_eps);
    Vec row = MatVec(out, 0, c.vocab_size, x[t]);
    if (c.final_softcap > 0) {
      for (double& v : row)
        v = c.final_softcap * std::tanh(v / c.final_softcap);
    }
    logits.push_back(row);
  }
  return logits;
}

class ArchTest : public ::testing::TestWithParam<std::string> {};

// Max |got - want| over max |want|; got holds rows of vocab floats.
double RelError(const std::vector<float>& got, const std::vector<Vec>& want) {
  double worst = 0.0, scale = 0.0;
  const size_t vocab = want[0].size();
  EXPECT_EQ(got.size(), want.size() * vocab);
  for (size_t t = 0; t < want.size(); ++t) {
    for (size_t v = 0; v < vocab && t * vocab + v < got.size(); ++v) {
      worst = std::max(worst, std::fabs(got[t * vocab + v] - want[t][v]));
      scale = std::max(scale, std::fabs(want[t][v]));
    }
  }
  return worst / scale;
}

// All-position logits: a prompt in chunks of 16, then single decode steps.
std::vector<float> EngineLogits(const Model& m,
                                const std::vector<int32_t>& tokens,
                                int64_t context_per_sequence) {
  TransformerOptions opt{2, 16};
  opt.context_per_sequence = context_per_sequence;
  Transformer tf(m.config, m.weights, opt);
  DenseKvCache cache(DenseCacheOptions(m.config, DType::kF32, 1024));
  std::vector<float> got, row;
  const size_t prompt = tokens.size() * 3 / 4;
  SequenceInput in = MakeInput(absl::MakeConstSpan(tokens).first(prompt),
                               &cache, LogitsMode::kAll, &got);
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  for (size_t t = prompt; t < tokens.size(); ++t) {
    SequenceInput s =
        MakeInput(absl::MakeConstSpan(&tokens[t], 1), &cache, LogitsMode::kLast,
                  &row, AppendKind::kGenerated);
    EXPECT_TRUE(tf.Forward(absl::MakeSpan(&s, 1)).ok());
    got.insert(got.end(), row.begin(), row.end());
  }
  return got;
}

TEST_P(ArchTest, EngineMatchesReferenceForward) {
  auto m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  const auto tokens = Tokens(40, m->config.vocab_size);
  const double err =
      RelError(EngineLogits(*m, tokens, 1024), ReferenceLogits(*m, tokens));
  // Float engine vs double reference over 3 layers: rounding only.
  EXPECT_LT(err, 1e-4) << GetParam();
  std::printf("%s: engine vs reference %.2e\n", GetParam().c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchTest, ::testing::ValuesIn(kArchNames),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ckv

namespace ckv {
namespace {

TEST(ArchConfig, MakeRandomWritesEachArchitecturesFeatures) {
  auto gemma2 = Load("gemma2");
  ASSERT_NE(gemma2, nullptr);
  const ModelConfig& g2 = gemma2->config;
  EXPECT_EQ(g2.sliding_window, 8);
  EXPECT_TRUE(g2.IsLocalLayer(0));
  EXPECT_FALSE(g2.IsLocalLayer(1));
  EXPECT_FLOAT_EQ(g2.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(g2.final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(g2.embed_scale, 8.0f);
  EXPECT_TRUE(g2.tied_embeddings);
  auto gemma3 = Load("gemma3");
  ASSERT_NE(gemma3, nullptr);
  const ModelConfig& g3 = gemma3->config;
  EXPECT_TRUE(g3.IsLocalLayer(1));
  EXPECT_FALSE(g3.IsLocalLayer(2));
  EXPECT_FLOAT_EQ(g3.rope_freq_scale, 1.0f / 8);
  EXPECT_FLOAT_EQ(g3.rope_freq_scale_local, 1.0f);
  EXPECT_FLOAT_EQ(g3.rope_freq_base_local, 10000.0f);
  EXPECT_TRUE(g3.qk_norm);
  auto glm = Load("chatglm");
  ASSERT_NE(glm, nullptr);
  EXPECT_EQ(glm->config.rope_dims * 2, glm->config.head_dim);
  EXPECT_TRUE(glm->config.qkv_bias);
  EXPECT_EQ(glm->config.rope_style, RopeStyle::kNormal);
  auto qwen3 = Load("qwen3");
  ASSERT_NE(qwen3, nullptr);
  EXPECT_EQ(qwen3->config.q_dim(), 96);
}

TEST(ArchConfig, UnknownArchitectureIsAClearError) {
  RandomModelSpec s = SpecFor("llama");
  s.arch = "mamba";
  const absl::Status st = WriteRandomModel(s, testing::TempPath("mamba.gguf"));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gemma3"), std::string::npos) << st;
}

// Out-of-range architecture keys are refused with the key's name.
TEST(ArchConfig, BadArchKeysAreNamed) {
  const std::string src =
      testing::RandomModelPath("arch_gemma2", SpecFor("gemma2"));
  for (const char* key : {"gemma2.attention.sliding_window",
                          "gemma2.attention.sliding_window_pattern",
                          "gemma2.attn_logit_softcapping"}) {
    auto f = gguf::GgufFile::Open(src);
    ASSERT_TRUE(f.ok());
    gguf::GgufWriter w;
    for (const auto& [k, v] : (*f)->metadata()) w.Set(k, v);
    for (const auto& t : (*f)->tensors()) {
      w.AddTensor(t.name, t.dims, t.type,
                  std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    w.SetFloat32(key, -1.0f);
    const std::string path = testing::TempPath("bad_key.gguf");
    ASSERT_TRUE(w.WriteFile(path).ok());
    const absl::Status st = LoadModel(path).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(st.message().find(key), std::string::npos) << st;
  }
}

// Phi-3: the long factors apply once a sequence may pass the original
// context, the short ones below it; attn_factor scales both.
TEST(ArchForward, Phi3LongRopeFactorsFollowTheContext) {
  auto m = Load("phi3");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->config.has_rope_long_factors);
  EXPECT_EQ(m->config.rope_orig_context, 4096);
  const auto tokens = Tokens(40, m->config.vocab_size);
  const auto want_long =
      ReferenceLogits(*m, tokens, /*long_rope_factors=*/true);
  EXPECT_LT(RelError(EngineLogits(*m, tokens, 8192), want_long), 1e-4);
  EXPECT_GT(RelError(EngineLogits(*m, tokens, 1024), want_long), 1e-3);
}

// Sliding windows and soft-caps change results (so the tests above would
// notice them missing).
TEST(ArchForward, GemmaWindowAndSoftCapsMatter) {
  auto m = Load("gemma2");
  ASSERT_NE(m, nullptr);
  const auto tokens = Tokens(40, m->config.vocab_size);
  const auto base = EngineLogits(*m, tokens, 1024);
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig c = m->config;
    if (variant == 0) c.sliding_window = 0;
    if (variant == 1) c.attn_softcap = 0.0f;
    if (variant == 2) c.final_softcap = 0.0f;
    Model changed{nullptr, c, m->weights, nullptr};
    const auto other = EngineLogits(changed, tokens, 1024);
    double d = 0.0;
    for (size_t i = 0; i < base.size(); ++i) {
      d = std::max(d, double{std::fabs(base[i] - other[i])});
    }
    EXPECT_GT(d, 1e-4) << "variant " << variant;
  }
}

// Logits of a prompt and `decode` fixed tokens through `cache`.
std::vector<float> Session(const Model& m, KvCache& cache, int prompt,
                           int decode) {
  Transformer tf(m.config, m.weights, {2, 64});
  std::vector<int32_t> tokens(prompt);
  for (int i = 0; i < prompt; ++i)
    tokens[i] = (i * 13 + 7) % m.config.vocab_size;
  std::vector<float> logits, all;
  SequenceInput in = MakeInput(tokens, &cache, LogitsMode::kLast, &logits);
  EXPECT_TRUE(tf.Forward(absl::MakeSpan(&in, 1)).ok());
  all = logits;
  for (int i = 0; i < decode; ++i) {
    const int32_t t[1] = {(i * 29 + 3) % m.config.vocab_size};
    SequenceInput step = MakeInput(t, &cache, LogitsMode::kLast, &logits,
                                   AppendKind::kGenerated);
    EXPECT_TRUE(tf.Forward(absl::MakeSpan(&step, 1)).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

TEST_P(ArchTest, BudgetCoveringEverythingEqualsDense) {
  auto m = Load(GetParam());
  ASSERT_NE(m, nullptr);
  DenseKvCache dense(DenseCacheOptions(m->config, DType::kF16, 4096));
  const auto want = Session(*m, dense, 200, 40);
  for (KvPolicy p : {KvPolicy::kClusterKv, KvPolicy::kQuest}) {
    KvStoreConfig c;
    c.policy = p;
    c.budget = 4096;
    c.dense_layers = 0;
    c.window = 16;  // window segments close during decode
    c.async_clustering = false;
    ClusteredKvStore store(KvShapeOf(m->config), c, nullptr);
    const auto got = Session(*m, store, 200, 40);
    double d = 0.0, scale = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      d = std::max(d, double{std::fabs(got[i] - want[i])});
      scale = std::max(scale, double{std::fabs(want[i])});
    }
    // Same rows attended in another span layout: rounding only (llama
    // measured up to 2.4e-5 in kv_policy_test).
    EXPECT_LT(d / scale, 1e-4) << GetParam() << " " << KvPolicyName(p);
    for (int l = 0; l < m->config.n_layers; ++l) {
      // Sliding-window layers are never indexed.
      const bool local = m->config.IsLocalLayer(l);
      EXPECT_EQ(store.segments()[0]->layer(l).heads.empty(), local)
          << GetParam() << " layer " << l;
    }
  }
}

}  // namespace
}  // namespace ckv
