#include "bench/cluster_keygen.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace ckv::bench {
namespace {

namespace cpu = kernels::cpu;

double Norm(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double{x[i]} * x[i];
  return std::sqrt(s);
}

void Normalize(float* x, int n) {
  const double norm = Norm(x, n);
  if (norm == 0) return;
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(x[i] / norm);
}

// Channels of the outlier pairs: the lowest-frequency RoPE pairs
// (2i, 2i+1) for i = d/2-1, d/2-3, ... (normal mode: theta_i shrinks with i).
std::vector<int> OutlierPairs(const KeyGenSpec& spec, int hd) {
  std::vector<int> first;
  for (int j = 0; j < spec.outlier_channels && 2 * j < hd / 2; ++j) {
    first.push_back(hd - 2 - 4 * j);
  }
  return first;
}

// Unit directions [directions][hd] and cumulative Zipf weights of one head.
struct Mixture {
  std::vector<float> dirs;
  std::vector<double> cdf;
  std::vector<float> outlier;  // [hd]: the fixed outlier offsets
};

Mixture MakeMixture(const KeyGenSpec& spec, int hd, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  Mixture m;
  m.dirs.resize(size_t{1} * spec.directions * hd);
  for (float& x : m.dirs) x = normal(rng);
  for (int j = 0; j < spec.directions; ++j) Normalize(&m.dirs[j * hd], hd);
  double total = 0;
  for (int j = 0; j < spec.directions; ++j) {
    total += 1.0 / std::pow(j + 1.0, spec.zipf);
    m.cdf.push_back(total);
  }
  for (double& c : m.cdf) c /= total;
  m.outlier.assign(hd, 0.0f);
  std::bernoulli_distribution sign;
  for (int c : OutlierPairs(spec, hd)) {
    m.outlier[c] =
        static_cast<float>(spec.outlier_magnitude * (sign(rng) ? 1.0 : -1.0));
  }
  return m;
}

// Pre-RoPE keys of one KV head into keys.k (head `g` of every row).
void FillHead(const KeyGenSpec& spec, int g, std::mt19937_64& rng,
              KeyData& keys) {
  const int hd = keys.head_dim;
  const Mixture m = MakeMixture(spec, hd, rng);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> uniform;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(hd));
  int comp = 0;
  for (int64_t p = 0; p < keys.n; ++p) {
    if (p == 0 || uniform(rng) >= spec.stay) {
      comp = static_cast<int>(
          std::lower_bound(m.cdf.begin(), m.cdf.end(), uniform(rng)) -
          m.cdf.begin());
      comp = std::min(comp, spec.directions - 1);
    }
    const double r = spec.scale * std::exp(spec.norm_sigma * normal(rng));
    float* k = &keys.k[(static_cast<size_t>(p) * keys.n_kv + g) * hd];
    const float* u = &m.dirs[size_t{1} * comp * hd];
    for (int d = 0; d < hd; ++d) {
      const double noise = spec.noise * inv_sqrt_d * normal(rng);
      const double out = m.outlier[d] * (1.0 + 0.1 * normal(rng));
      k[d] = static_cast<float>(r * (u[d] + noise) + out);
    }
  }
}

}  // namespace

KeyData GenerateKeys(const KeyGenSpec& spec, int n_kv, int head_dim, int64_t n,
                     uint64_t seed, cpu::ThreadPool* pool) {
  KeyData keys;
  keys.n = n;
  keys.n_kv = n_kv;
  keys.head_dim = head_dim;
  keys.k.resize(static_cast<size_t>(n) * n_kv * head_dim);
  keys.v.resize(keys.k.size());
  for (int g = 0; g < n_kv; ++g) {
    std::mt19937_64 rng(seed * 1000003 + g);
    FillHead(spec, g, rng, keys);
  }
  std::mt19937_64 rng(seed ^ 0x5eed5eedull);
  std::normal_distribution<float> normal;
  for (float& x : keys.v) x = normal(rng);
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  cpu::RopeParams rope;
  rope.mode = cpu::RopeMode::kNormal;
  rope.rot_dims = head_dim;
  rope.freq_base = spec.rope_base;
  cpu::Rope(pool, keys.k.data(), n, n_kv, head_dim, pos.data(), rope);
  return keys;
}

namespace {

// Standard deviation of q.k over up to 2048 evenly spaced keys of `g`.
double ScoreStd(const float* q, const KeyData& keys, int g, int64_t end) {
  const int hd = keys.head_dim;
  const int64_t stride = std::max<int64_t>(1, end / 2048);
  double s = 0, s2 = 0;
  int64_t count = 0;
  for (int64_t p = 0; p < end; p += stride, ++count) {
    const float* k = keys.key(p, g);
    double dot = 0;
    for (int d = 0; d < hd; ++d) dot += double{q[d]} * k[d];
    s += dot;
    s2 += dot * dot;
  }
  const double mean = s / count;
  return std::sqrt(std::max(0.0, s2 / count - mean * mean));
}

// One query head of KV head g: the regions' keys, outlier pairs removed.
void MakeHeadQuery(const KeyGenSpec& spec, const KeyData& keys, int g,
                   int64_t first, int64_t end, std::mt19937_64& rng, float* q) {
  const int hd = keys.head_dim;
  const int64_t len = std::min<int64_t>(spec.region_tokens, end - first);
  std::uniform_int_distribution<int64_t> start(first, end - len);
  std::fill(q, q + hd, 0.0f);
  for (int r = 0; r < spec.query_regions; ++r) {
    const int64_t s = start(rng);
    for (int64_t p = s; p < s + len; ++p) {
      const float* k = keys.key(p, g);
      for (int d = 0; d < hd; ++d) q[d] += k[d];
    }
  }
  for (int c : OutlierPairs(spec, hd)) q[c] = q[c + 1] = 0.0f;
  Normalize(q, hd);
  std::normal_distribution<float> normal;
  const double rel = spec.query_noise / std::sqrt(static_cast<double>(hd));
  for (int d = 0; d < hd; ++d) q[d] += static_cast<float>(rel * normal(rng));
  const double sd = ScoreStd(q, keys, g, end);
  const double scale = sd > 0 ? spec.logit_std * std::sqrt(hd * 1.0) / sd : 1;
  for (int d = 0; d < hd; ++d) q[d] = static_cast<float>(q[d] * scale);
}

}  // namespace

std::vector<float> MakeQuery(const KeyGenSpec& spec, const KeyData& keys,
                             int n_heads, int64_t first, int64_t end,
                             std::mt19937_64& rng) {
  const int hd = keys.head_dim, group = n_heads / keys.n_kv;
  std::vector<float> q(static_cast<size_t>(n_heads) * hd);
  for (int h = 0; h < n_heads; ++h) {
    MakeHeadQuery(spec, keys, h / group, first, end, rng,
                  &q[size_t{1} * h * hd]);
  }
  return q;
}

std::vector<float> PerturbQuery(const std::vector<float>& base, int head_dim,
                                double noise, std::mt19937_64& rng) {
  std::vector<float> q = base;
  std::normal_distribution<float> normal;
  const double rel = noise / std::sqrt(static_cast<double>(head_dim));
  for (size_t h = 0; h < q.size() / head_dim; ++h) {
    float* x = &q[h * head_dim];
    const double norm = Norm(x, head_dim);
    for (int d = 0; d < head_dim; ++d) {
      x[d] += static_cast<float>(rel * norm * normal(rng));
    }
    const double scale = norm / std::max(Norm(x, head_dim), 1e-30);
    for (int d = 0; d < head_dim; ++d) x[d] = static_cast<float>(x[d] * scale);
  }
  return q;
}

}  // namespace ckv::bench
