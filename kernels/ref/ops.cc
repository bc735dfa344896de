// Scalar reference ops (kernels/ref/ops.h): the oracle for every fast path.
// Clarity over speed; accumulation in double.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ref/ops.h"

namespace ckv::kernels::ref {
namespace {

double ElementAt(DType t, const void* row, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(row)[i];
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(row)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(row)[i]);
    default: {  // block types: dequantise the element's block
      const int bs = BlockSize(t);
      const char* block =
          static_cast<const char*>(row) + i / bs * BlockBytes(t);
      float v[256];
      DequantizeRow(t, block, bs, v);
      return v[i % bs];
    }
  }
}

const void* RowAt(const void* base, DType t, int64_t stride, int64_t r) {
  return static_cast<const char*>(base) + r * RowBytes(t, stride);
}

}  // namespace

namespace {

float Exact(float x) { return x; }
float RoundToBf16(float x) { return BF16ToF32(F32ToBF16(x)); }

// y[t][o] = sum_i round(W_o[i]) * round(x_t[i]), summed in double.
void MatMulRounded(float (*round)(float), DType wtype, const void* w,
                   int64_t n_in, int64_t n_out, const float* x,
                   int64_t n_tokens, float* y) {
  const int64_t row_bytes = RowBytes(wtype, n_in);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    DequantizeRow(wtype, static_cast<const char*>(w) + o * row_bytes, n_in,
                  row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      double acc = 0.0;
      for (int64_t i = 0; i < n_in; ++i) {
        acc += double{round(row[i])} * round(x[t * n_in + i]);
      }
      y[t * n_out + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace

void MatMul(DType wtype, const void* w, int64_t n_in, int64_t n_out,
            const float* x, int64_t n_tokens, float* y) {
  MatMulRounded(Exact, wtype, w, n_in, n_out, x, n_tokens, y);
}

void MatMulBf16(DType wtype, const void* w, int64_t n_in, int64_t n_out,
                const float* x, int64_t n_tokens, float* y) {
  MatMulRounded(RoundToBf16, wtype, w, n_in, n_out, x, n_tokens, y);
}

void RmsNorm(const float* x, const float* weight, int64_t n_rows, int64_t n,
             float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double{x[r * n + i]} * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) {
      y[r * n + i] = static_cast<float>(x[r * n + i] * inv * weight[i]);
    }
  }
}

void Rope(float* x, int64_t n_tokens, int n_heads, int head_dim,
          const int64_t* positions, const RopeParams& p) {
  const int half = p.rot_dims / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        double theta = static_cast<double>(positions[t]) * p.freq_scale *
                       std::pow(double{p.freq_base}, -2.0 * i / p.rot_dims);
        if (p.freq_factors != nullptr) theta /= p.freq_factors[i];
        const int i0 = p.mode == RopeMode::kNormal ? 2 * i : i;
        const int i1 = p.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
        const double x0 = v[i0], x1 = v[i1];
        const double c = std::cos(theta) * p.attn_factor;
        const double s = std::sin(theta) * p.attn_factor;
        v[i0] = static_cast<float>(x0 * c - x1 * s);
        v[i1] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeluTanhGate(const float* gate, const float* up, int64_t n, float* out) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    const double gelu =
        0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)));
    out[i] = static_cast<float>(gelu * up[i]);
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(cap * std::tanh(double{x[i]} / cap));
  }
}

void AddBias(float* x, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
  }
}

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

namespace {

// One query vector over one head's spans (two-pass softmax): the largest
// visible score, the weights' sum and the unnormalised accumulator.
struct Partial {
  double max_s = -INFINITY;
  double sum = 0.0;
  std::vector<double> acc;
};

Partial AttendOne(const float* q, int64_t q_pos, const AttentionArgs& a,
                  const KvSpanList& list) {
  const int head_dim = a.head_dim;
  std::vector<double> scores;
  std::vector<const void*> vrows;
  std::vector<DType> vtypes;
  for (int s = 0; s < list.count; ++s) {
    const KvSpan& sp = list.spans[s];
    for (int64_t r = 0; r < sp.count; ++r) {
      const int64_t i = sp.rows ? sp.rows[r] : r;  // stored row
      const int64_t pos = SpanRowPosition(sp, r);
      if (pos > q_pos || (a.window > 0 && q_pos - pos >= a.window)) continue;
      const void* k = RowAt(sp.k, sp.dtype, sp.stride, i);
      double dot = 0.0;
      for (int d = 0; d < head_dim; ++d) {
        dot += q[d] * ElementAt(sp.dtype, k, d);
      }
      double score = dot * a.scale;
      if (a.softcap > 0.0f) score = a.softcap * std::tanh(score / a.softcap);
      scores.push_back(score);
      vrows.push_back(RowAt(sp.v, sp.dtype, sp.stride, i));
      vtypes.push_back(sp.dtype);
    }
  }
  Partial p;
  p.acc.assign(head_dim, 0.0);
  for (double s : scores) p.max_s = std::max(p.max_s, s);
  for (size_t j = 0; j < scores.size(); ++j) {
    const double w = std::exp(scores[j] - p.max_s);
    p.sum += w;
    for (int d = 0; d < head_dim; ++d) {
      p.acc[d] += w * ElementAt(vtypes[j], vrows[j], d);
    }
  }
  return p;
}

}  // namespace

void Attention(const AttentionArgs& a) {
  for (int t = 0; t < a.n_q; ++t) {
    for (int h = 0; h < a.n_heads; ++h) {
      const int64_t off = (int64_t{t} * a.n_heads + h) * a.head_dim;
      const Partial p = AttendOne(a.q + off, a.q_pos[t], a, a.kv[h]);
      for (int d = 0; d < a.head_dim; ++d) {
        a.out[off + d] =
            p.sum > 0.0 ? static_cast<float>(p.acc[d] / p.sum) : 0.0f;
      }
    }
  }
}

void AttentionAccumulate(const AttentionArgs& a, float* state, bool fresh) {
  const int64_t width = a.head_dim + 2;
  for (int t = 0; t < a.n_q; ++t) {
    for (int h = 0; h < a.n_heads; ++h) {
      const int64_t off = (int64_t{t} * a.n_heads + h) * a.head_dim;
      const Partial p = AttendOne(a.q + off, a.q_pos[t], a, a.kv[h]);
      float* st = state + (int64_t{t} * a.n_heads + h) * width;
      const double old_l = fresh ? 0.0 : st[1];
      const double old_m = old_l > 0.0 ? st[0] : -INFINITY;
      const double m = std::max(old_m, p.sum > 0.0 ? p.max_s : -INFINITY);
      const double f_old = old_l > 0.0 ? std::exp(old_m - m) : 0.0;
      const double f_new = p.sum > 0.0 ? std::exp(p.max_s - m) : 0.0;
      for (int d = 0; d < a.head_dim; ++d) {
        const double old_acc = old_l > 0.0 ? st[2 + d] : 0.0;
        st[2 + d] = static_cast<float>(old_acc * f_old + p.acc[d] * f_new);
      }
      st[0] = static_cast<float>(m);
      st[1] = static_cast<float>(old_l * f_old + p.sum * f_new);
    }
  }
}

void AttentionFinish(const float* state, int64_t n, int head_dim, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* st = state + i * (head_dim + 2);
    for (int d = 0; d < head_dim; ++d) {
      out[i * head_dim + d] = st[1] > 0.0f ? st[2 + d] / st[1] : 0.0f;
    }
  }
}

}  // namespace ckv::kernels::ref
