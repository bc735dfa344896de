#include "model/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/backend/cpu/cpu_backend.h"

namespace ckv {

namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0)
      .count();
}

}  // namespace

// Rows of one sequence inside a step.
struct StepPart {
  int seq = 0;  // index into the batch
  KvCache* cache = nullptr;
  int64_t src_offset = 0;  // first token within the sequence's input
  int64_t row = 0;         // first row within the step
  int64_t n = 0;
  int64_t pos0 = 0;  // position of the first token
};

struct Transformer::Step {
  absl::Span<SequenceInput> batch;
  std::vector<StepPart> parts;
  int64_t rows = 0;
};

// One handle per activation; widths fixed by the config.
struct Transformer::Acts {
  Activation x, xn, q, k, v, attn, gate, up, tmp;

  Acts(Backend& b, const ModelConfig& c)
      : x(b.NewActivation(c.d_model)),
        xn(b.NewActivation(c.d_model)),
        q(b.NewActivation(c.q_dim())),
        k(b.NewActivation(c.kv_dim())),
        v(b.NewActivation(c.kv_dim())),
        attn(b.NewActivation(c.q_dim())),
        gate(b.NewActivation(c.ffn_dim)),
        up(b.NewActivation(c.ffn_dim)),
        tmp(b.NewActivation(c.d_model)) {}
};

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights,
                         const TransformerOptions& options)
    : Transformer(config, weights, options,
                  std::make_unique<CpuBackend>(
                      BackendOptions{.threads = options.threads})) {}

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights,
                         const TransformerOptions& options,
                         std::unique_ptr<Backend> backend)
    : config_(config),
      weights_(weights),
      options_(options),
      backend_(std::move(backend)),
      acts_(std::make_unique<Acts>(*backend_, config_)) {
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
}

Transformer::~Transformer() = default;

absl::Status Transformer::Validate(absl::Span<SequenceInput> batch) const {
  for (const SequenceInput& s : batch) {
    if (s.cache == nullptr) return absl::InvalidArgumentError("no KV cache");
    if (s.tokens.empty()) return absl::InvalidArgumentError("empty input");
    if (s.logits != LogitsMode::kNone && s.logits_out == nullptr) {
      return absl::InvalidArgumentError("logits requested without output");
    }
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= config_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", t, " outside the vocabulary [0, ",
                         config_.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Transformer::Forward(absl::Span<SequenceInput> batch) {
  if (auto s = Validate(batch); !s.ok()) return s;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& in = batch[i];
    if (in.reserved) continue;
    if (auto s = in.cache->Reserve(in.tokens.size(), in.kind); !s.ok()) {
      for (size_t j = 0; j < i; ++j) {
        if (batch[j].reserved) continue;
        batch[j].cache->Reserve(0, batch[j].kind).IgnoreError();
      }
      return s;
    }
  }
  for (SequenceInput& s : batch) {
    const int64_t rows = s.logits == LogitsMode::kAll    ? s.tokens.size()
                         : s.logits == LogitsMode::kLast ? 1
                                                         : 0;
    if (s.logits_out) s.logits_out->assign(rows * config_.vocab_size, 0.0f);
  }
  // Greedy chunking: up to prefill_chunk rows per step across sequences.
  Step step;
  step.batch = batch;
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t done = 0;
    const int64_t total = batch[i].tokens.size();
    int64_t pos = batch[i].cache->num_tokens();
    while (done < total) {
      if (step.rows == options_.prefill_chunk) {
        RunStep(step);
        step.parts.clear();
        step.rows = 0;
      }
      const int64_t n =
          std::min(total - done, options_.prefill_chunk - step.rows);
      step.parts.push_back(
          {static_cast<int>(i), batch[i].cache, done, step.rows, n, pos});
      step.rows += n;
      done += n;
      pos += n;
    }
  }
  if (step.rows > 0) RunStep(step);
  // A device backend's first error (its ops return nothing); the CPU
  // backend's is always OK.
  return backend_->status();
}

void Transformer::RunStep(const Step& step) {
  const Clock::time_point t0 =
      options_.profile ? Clock::now() : Clock::time_point{};
  pos_.resize(step.rows);
  attn_parts_.clear();
  for (const StepPart& p : step.parts) {
    for (int64_t i = 0; i < p.n; ++i) pos_[p.row + i] = p.pos0 + i;
    attn_parts_.push_back({p.cache, p.row, p.n});
  }
  backend_->BeginStep(pos_);
  Embed(step);
  for (int l = 0; l < config_.n_layers; ++l) {
    // Between attentions the ops are pure compute at the same addresses
    // every step of this size: regions a device backend may replay as
    // graphs (Backend::BeginRegion).
    backend_->BeginRegion(2 * l);
    PreAttention(l);
    backend_->EndRegion();
    Attend(l);
    backend_->BeginRegion(2 * l + 1);
    PostAttention(l);
    MlpBlock(l);
    backend_->EndRegion();
  }
  // Logits first: a device backend's one wait for them also covers the K,V
  // rows it appended on the device, which the caches get before Commit.
  OutputLogits(step);
  backend_->FinishAppends();
  for (const StepPart& p : step.parts) p.cache->Commit(p.n);
  backend_->EndStep();
  if (options_.profile) {
    profile_.total_ns += NanosSince(t0);
    ++profile_.steps;
  }
}

void Transformer::Embed(const Step& step) {
  tokens_.resize(step.rows);
  for (const StepPart& p : step.parts) {
    const auto& tokens = step.batch[p.seq].tokens;
    for (int64_t i = 0; i < p.n; ++i) {
      tokens_[p.row + i] = tokens[p.src_offset + i];
    }
  }
  backend_->Embed(weights_.token_embd, tokens_, config_.embed_scale, acts_->x);
}

// q, k, v of the step's rows: projections, biases and per-head Q/K norms.
void Transformer::ProjectQkv(int layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const Acts& a = *acts_;
  Backend& be = *backend_;
  be.MatMul(w.wq, a.xn, a.q);
  be.MatMul(w.wk, a.xn, a.k);
  be.MatMul(w.wv, a.xn, a.v);
  if (c.qkv_bias) {
    be.AddBias(a.q, w.bq);
    be.AddBias(a.k, w.bk);
    be.AddBias(a.v, w.bv);
  }
  if (c.qk_norm) {  // in place, one row per head
    be.RmsNorm(a.q, w.q_norm, c.rms_eps, a.q);
    be.RmsNorm(a.k, w.k_norm, c.rms_eps, a.k);
  }
}

// Local (sliding-window) layers may use their own base and scaling.
RopeSpec Transformer::LayerRope(int layer) const {
  const ModelConfig& c = config_;
  const bool local = c.IsLocalLayer(layer);
  RopeSpec rope;
  rope.style = c.rope_style;
  rope.rot_dims = c.rope_dims;
  rope.freq_base = local ? c.rope_freq_base_local : c.rope_freq_base;
  rope.freq_scale = local ? c.rope_freq_scale_local : c.rope_freq_scale;
  rope.attn_factor = c.rope_attn_factor;
  const int64_t ctx = options_.context_per_sequence > 0
                          ? options_.context_per_sequence
                          : c.context_length;
  const bool long_factors =
      !weights_.rope_freqs_long.empty() && ctx > c.rope_orig_context;
  const std::vector<float>& factors =
      long_factors ? weights_.rope_freqs_long : weights_.rope_freqs;
  rope.freq_factors = factors.empty() ? nullptr : factors.data();
  return rope;
}

void Transformer::PreAttention(int layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const Acts& a = *acts_;
  Backend& be = *backend_;
  be.RmsNorm(a.x, w.attn_norm, c.rms_eps, a.xn);
  ProjectQkv(layer);
  const RopeSpec rope = LayerRope(layer);
  be.Rope(a.q, c.n_heads, rope);
  be.Rope(a.k, c.n_kv_heads, rope);
}

void Transformer::Attend(int layer) {
  const ModelConfig& c = config_;
  const Acts& a = *acts_;
  AttentionSpec spec;
  spec.n_heads = c.n_heads;
  spec.head_dim = c.head_dim;
  spec.scale = c.attn_scale > 0.0f
                   ? c.attn_scale
                   : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  spec.softcap = c.attn_softcap;
  spec.window = c.LayerWindow(layer);
  backend_->Attention(layer, spec, attn_parts_, a.q, a.k, a.v, a.attn,
                      options_.profile ? &profile_ : nullptr);
}

void Transformer::PostAttention(int layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const Acts& a = *acts_;
  Backend& be = *backend_;
  be.MatMul(w.wo, a.attn, a.tmp);
  if (c.post_norms) be.RmsNorm(a.tmp, w.post_attn_norm, c.rms_eps, a.tmp);
  be.Add(a.x, a.tmp);
}

void Transformer::MlpBlock(int layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const Acts& a = *acts_;
  Backend& be = *backend_;
  be.RmsNorm(a.x, w.ffn_norm, c.rms_eps, a.xn);
  be.MatMul(w.w_gate, a.xn, a.gate);
  be.MatMul(w.w_up, a.xn, a.up);
  be.Gate(c.ffn_act, a.gate, a.up, a.gate);
  be.MatMul(w.w_down, a.gate, a.tmp);
  if (c.post_norms) be.RmsNorm(a.tmp, w.post_ffn_norm, c.rms_eps, a.tmp);
  be.Add(a.x, a.tmp);
}

void Transformer::OutputLogits(const Step& step) {
  const ModelConfig& c = config_;
  // The rows whose logits are wanted.
  logit_rows_.clear();
  for (const StepPart& p : step.parts) {
    const SequenceInput& s = step.batch[p.seq];
    const int64_t last = static_cast<int64_t>(s.tokens.size()) - 1;
    for (int64_t i = 0; i < p.n; ++i) {
      const bool want =
          s.logits == LogitsMode::kAll ||
          (s.logits == LogitsMode::kLast && p.src_offset + i == last);
      if (want) logit_rows_.push_back(p.row + i);
    }
  }
  const int64_t n = logit_rows_.size();
  if (n == 0) return;
  backend_->Logits(acts_->x, logit_rows_, weights_.output_norm, c.rms_eps,
                   weights_.output, c.final_softcap, &logits_);
  // Scatter rows to each sequence's output.
  int64_t j = 0;
  for (const StepPart& p : step.parts) {
    const SequenceInput& s = step.batch[p.seq];
    for (int64_t i = 0; i < p.n; ++i) {
      if (j == n || logit_rows_[j] != p.row + i) continue;
      const int64_t out_row =
          s.logits == LogitsMode::kAll ? p.src_offset + i : 0;
      std::memcpy(s.logits_out->data() + out_row * c.vocab_size,
                  &logits_[j * c.vocab_size], c.vocab_size * sizeof(float));
      ++j;
    }
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> NewTransformer(
    const ModelConfig& config, const ModelWeights& weights,
    const TransformerOptions& options, BackendKind kind) {
  auto backend = MakeBackend(kind, BackendOptions{.threads = options.threads});
  if (!backend.ok()) return backend.status();
  return std::make_unique<Transformer>(config, weights, options,
                                       *std::move(backend));
}

}  // namespace ckv
