#include "model/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"

namespace ckv {

namespace cpu = kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;

int64_t NanosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                              t0)
      .count();
}

}  // namespace

// Rows of one sequence inside a step.
struct StepPart {
  int seq = 0;           // index into the batch
  KvCache* cache = nullptr;
  int64_t src_offset = 0;  // first token within the sequence's input
  int64_t row = 0;         // first row within the step
  int64_t n = 0;
  int64_t pos0 = 0;        // position of the first token
};

struct Transformer::Step {
  absl::Span<SequenceInput> batch;
  std::vector<StepPart> parts;
  int64_t rows = 0;
};

struct Transformer::Buffers {
  std::vector<float> x, xn, q, k, v, attn, gate, up, tmp, logits;
  std::vector<int64_t> pos;
  std::vector<int64_t> logit_rows;
  AttendSet attend;

  void Size(const ModelConfig& c, int64_t rows) {
    x.resize(rows * c.d_model);
    xn.resize(rows * c.d_model);
    tmp.resize(rows * c.d_model);
    q.resize(rows * c.q_dim());
    attn.resize(rows * c.q_dim());
    k.resize(rows * c.kv_dim());
    v.resize(rows * c.kv_dim());
    gate.resize(rows * c.ffn_dim);
    up.resize(rows * c.ffn_dim);
    pos.resize(rows);
  }
};

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights,
                         const TransformerOptions& options)
    : config_(config),
      weights_(weights),
      options_(options),
      pool_(std::make_unique<cpu::ThreadPool>(std::max(1, options.threads))),
      buf_(std::make_unique<Buffers>()) {
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
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", t, " outside the vocabulary [0, ", config_.vocab_size,
            ")"));
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
    const int64_t rows = s.logits == LogitsMode::kAll ? s.tokens.size()
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
      step.parts.push_back({static_cast<int>(i), batch[i].cache, done,
                            step.rows, n, pos});
      step.rows += n;
      done += n;
      pos += n;
    }
  }
  if (step.rows > 0) RunStep(step);
  return absl::OkStatus();
}

void Transformer::RunStep(const Step& step) {
  const Clock::time_point t0 =
      options_.profile ? Clock::now() : Clock::time_point{};
  buf_->Size(config_, step.rows);
  for (const StepPart& p : step.parts) {
    for (int64_t i = 0; i < p.n; ++i) buf_->pos[p.row + i] = p.pos0 + i;
  }
  Embed(step);
  for (int l = 0; l < config_.n_layers; ++l) {
    AttentionBlock(l, step);
    MlpBlock(l, step);
  }
  for (const StepPart& p : step.parts) p.cache->Commit(p.n);
  OutputLogits(step);
  if (options_.profile) {
    profile_.total_ns += NanosSince(t0);
    ++profile_.steps;
  }
}

void Transformer::Embed(const Step& step) {
  const Matrix& e = weights_.token_embd;
  const int64_t row_bytes = kernels::RowBytes(e.type, e.cols);
  for (const StepPart& p : step.parts) {
    const auto& tokens = step.batch[p.seq].tokens;
    for (int64_t i = 0; i < p.n; ++i) {
      const int32_t t = tokens[p.src_offset + i];
      float* x = &buf_->x[(p.row + i) * config_.d_model];
      cpu::DequantizeRow(e.type,
                         static_cast<const uint8_t*>(e.data) + t * row_bytes,
                         e.cols, x);
      if (config_.embed_scale != 1.0f) {
        for (int j = 0; j < config_.d_model; ++j) x[j] *= config_.embed_scale;
      }
    }
  }
}

namespace {
void MatMul(cpu::ThreadPool* pool, const Matrix& w, const float* x,
            int64_t rows, float* y) {
  cpu::MatMul(pool, w.type, w.data, w.cols, w.rows, x, rows, y);
}
}  // namespace

// q, k, v of the step's rows: projections, biases and per-head Q/K norms.
void Transformer::ProjectQkv(int layer, int64_t rows) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  Buffers& b = *buf_;
  MatMul(pool(), w.wq, b.xn.data(), rows, b.q.data());
  MatMul(pool(), w.wk, b.xn.data(), rows, b.k.data());
  MatMul(pool(), w.wv, b.xn.data(), rows, b.v.data());
  if (c.qkv_bias) {
    cpu::AddBias(b.q.data(), w.bq.data(), rows, c.q_dim());
    cpu::AddBias(b.k.data(), w.bk.data(), rows, c.kv_dim());
    cpu::AddBias(b.v.data(), w.bv.data(), rows, c.kv_dim());
  }
  if (c.qk_norm) {  // in place, one row per head
    cpu::RmsNorm(pool(), b.q.data(), w.q_norm.data(), rows * c.n_heads,
                 c.head_dim, c.rms_eps, b.q.data());
    cpu::RmsNorm(pool(), b.k.data(), w.k_norm.data(), rows * c.n_kv_heads,
                 c.head_dim, c.rms_eps, b.k.data());
  }
}

// Local (sliding-window) layers may use their own base and scaling.
cpu::RopeParams Transformer::LayerRope(int layer) const {
  const ModelConfig& c = config_;
  const bool local = c.IsLocalLayer(layer);
  cpu::RopeParams rope;
  rope.mode = c.rope_style == RopeStyle::kNeox ? cpu::RopeMode::kNeox
                                               : cpu::RopeMode::kNormal;
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

void Transformer::AttentionBlock(int layer, const Step& step) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  Buffers& b = *buf_;
  const int64_t rows = step.rows;
  cpu::RmsNorm(pool(), b.x.data(), w.attn_norm.data(), rows, c.d_model,
               c.rms_eps, b.xn.data());
  ProjectQkv(layer, rows);
  const cpu::RopeParams rope = LayerRope(layer);
  cpu::Rope(pool(), b.q.data(), rows, c.n_heads, c.head_dim, b.pos.data(),
            rope);
  cpu::Rope(pool(), b.k.data(), rows, c.n_kv_heads, c.head_dim, b.pos.data(),
            rope);
  for (const StepPart& p : step.parts) {
    const Clock::time_point t0 =
        options_.profile ? Clock::now() : Clock::time_point{};
    AttendPart(layer, p);
    if (options_.profile) profile_.attention_ns += NanosSince(t0);
  }
  MatMul(pool(), w.wo, b.attn.data(), rows, b.tmp.data());
  if (c.post_norms) {
    cpu::RmsNorm(pool(), b.tmp.data(), w.post_attn_norm.data(), rows, c.d_model,
                 c.rms_eps, b.tmp.data());
  }
  cpu::Add(b.x.data(), b.tmp.data(), rows * c.d_model);
}

// Appends the part's K,V, asks its cache what to attend, and attends.
void Transformer::AttendPart(int layer, const StepPart& p) {
  const ModelConfig& c = config_;
  Buffers& b = *buf_;
  p.cache->Append(layer, p.n, &b.k[p.row * c.kv_dim()],
                  &b.v[p.row * c.kv_dim()]);
  LayerQuery query{&b.q[p.row * c.q_dim()], &b.pos[p.row],
                   static_cast<int>(p.n)};
  const Clock::time_point t0 =
      options_.profile ? Clock::now() : Clock::time_point{};
  p.cache->Select(layer, query, &b.attend);
  if (options_.profile) profile_.select_ns += NanosSince(t0);
  cpu::AttentionArgs args;
  args.q = query.q;
  args.q_pos = query.q_pos;
  args.n_q = query.n_q;
  args.n_heads = c.n_heads;
  args.head_dim = c.head_dim;
  args.scale = c.attn_scale > 0.0f
                   ? c.attn_scale
                   : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  args.softcap = c.attn_softcap;
  args.window = c.LayerWindow(layer);
  args.kv = b.attend.per_head.data();
  args.out = &b.attn[p.row * c.q_dim()];
  cpu::Attention(pool(), args);
}

void Transformer::MlpBlock(int layer, const Step& step) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  Buffers& b = *buf_;
  const int64_t rows = step.rows;
  cpu::RmsNorm(pool(), b.x.data(), w.ffn_norm.data(), rows, c.d_model,
               c.rms_eps, b.xn.data());
  MatMul(pool(), w.w_gate, b.xn.data(), rows, b.gate.data());
  MatMul(pool(), w.w_up, b.xn.data(), rows, b.up.data());
  if (c.ffn_act == FfnActivation::kGeluTanhGate) {
    cpu::GeluTanhGate(pool(), b.gate.data(), b.up.data(), rows * c.ffn_dim,
                      b.gate.data());
  } else {
    cpu::SwiGlu(pool(), b.gate.data(), b.up.data(), rows * c.ffn_dim,
                b.gate.data());
  }
  MatMul(pool(), w.w_down, b.gate.data(), rows, b.tmp.data());
  if (c.post_norms) {
    cpu::RmsNorm(pool(), b.tmp.data(), w.post_ffn_norm.data(), rows, c.d_model,
                 c.rms_eps, b.tmp.data());
  }
  cpu::Add(b.x.data(), b.tmp.data(), rows * c.d_model);
}

void Transformer::OutputLogits(const Step& step) {
  const ModelConfig& c = config_;
  Buffers& b = *buf_;
  // Gather the rows whose logits are wanted into xn, normalised.
  b.logit_rows.clear();
  for (const StepPart& p : step.parts) {
    const SequenceInput& s = step.batch[p.seq];
    const int64_t last = static_cast<int64_t>(s.tokens.size()) - 1;
    for (int64_t i = 0; i < p.n; ++i) {
      const bool want = s.logits == LogitsMode::kAll ||
                        (s.logits == LogitsMode::kLast &&
                         p.src_offset + i == last);
      if (want) b.logit_rows.push_back(p.row + i);
    }
  }
  const int64_t n = b.logit_rows.size();
  if (n == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    cpu::RmsNorm(nullptr, &b.x[b.logit_rows[j] * c.d_model],
                 weights_.output_norm.data(), 1, c.d_model, c.rms_eps,
                 &b.xn[j * c.d_model]);
  }
  b.logits.resize(n * c.vocab_size);
  MatMul(pool(), weights_.output, b.xn.data(), n, b.logits.data());
  if (c.final_softcap > 0.0f) {
    cpu::SoftCap(pool(), b.logits.data(), n * c.vocab_size, c.final_softcap);
  }
  // Scatter rows to each sequence's output.
  int64_t j = 0;
  for (const StepPart& p : step.parts) {
    const SequenceInput& s = step.batch[p.seq];
    for (int64_t i = 0; i < p.n; ++i) {
      if (j == n || b.logit_rows[j] != p.row + i) continue;
      const int64_t out_row =
          s.logits == LogitsMode::kAll ? p.src_offset + i : 0;
      std::memcpy(s.logits_out->data() + out_row * c.vocab_size,
                  &b.logits[j * c.vocab_size], c.vocab_size * sizeof(float));
      ++j;
    }
  }
}

}  // namespace ckv
