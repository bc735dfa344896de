#include "model/kv/quality.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"

namespace ckv {

namespace cpu = kernels::cpu;

// ------------------------------------------------- math on plain arrays

std::vector<int64_t> TopKIndices(const std::vector<double>& scores, int64_t k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t a, int64_t b) {
                      if (scores[a] != scores[b]) return scores[a] > scores[b];
                      return a < b;
                    });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

double RecallOf(const std::vector<int64_t>& truth,
                const std::vector<int64_t>& selected) {
  std::vector<int64_t> want = truth, got = selected;
  for (auto* v : {&want, &got}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
  if (want.empty()) return 1.0;
  std::vector<int64_t> hit;
  std::set_intersection(want.begin(), want.end(), got.begin(), got.end(),
                        std::back_inserter(hit));
  return static_cast<double>(hit.size()) / static_cast<double>(want.size());
}

std::vector<double> Softmax(const std::vector<double>& x, double scale) {
  std::vector<double> p(x.size());
  if (x.empty()) return p;
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    p[i] = std::exp(scale * (x[i] - m));
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  return p;
}

double MaskedMass(const std::vector<double>& probs,
                  const std::vector<char>& mask) {
  double s = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (mask[i]) s += probs[i];
  }
  return s;
}

std::vector<double> AttentionOutput(const std::vector<double>& scores,
                                    const std::vector<char>* mask,
                                    const std::vector<float>& values,
                                    int head_dim, double scale) {
  std::vector<double> out(head_dim, 0.0);
  double m = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < scores.size(); ++i) {
    if (mask == nullptr || (*mask)[i]) m = std::max(m, scores[i]);
  }
  double sum = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (mask != nullptr && !(*mask)[i]) continue;
    const double w = std::exp(scale * (scores[i] - m));
    sum += w;
    for (int d = 0; d < head_dim; ++d) out[d] += w * values[i * head_dim + d];
  }
  if (sum > 0) {
    for (double& v : out) v /= sum;
  }
  return out;
}

double RelativeError(const std::vector<double>& approx,
                     const std::vector<double>& exact) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    diff += (approx[i] - exact[i]) * (approx[i] - exact[i]);
    norm += exact[i] * exact[i];
  }
  if (norm == 0) {
    return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  }
  return std::sqrt(diff / norm);
}

namespace {

// log(sum_i exp(x_i)) of n floats, max-subtracted.
double LogSumExp(const float* x, int64_t n) {
  const double m = *std::max_element(x, x + n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  return m + std::log(s);
}

}  // namespace

double LogitKl(const float* p, const float* q, int64_t n) {
  const double lp = LogSumExp(p, n), lq = LogSumExp(q, n);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double log_p = p[i] - lp, log_q = q[i] - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(0.0, kl);
}

bool SameArgmax(const float* a, const float* b, int64_t n) {
  return std::max_element(a, a + n) - a == std::max_element(b, b + n) - b;
}

// ------------------------------------------------------ store measures

namespace {

// Keys and values of positions [0, n) of one (layer, KV head), as float.
struct HeadRows {
  std::vector<float> k, v;  // [n][head_dim]
};

// Converts stored row i of span s (K or V data at `base`) to float.
void RowToFloat(const kernels::KvSpan& s, const void* base, int64_t i, int hd,
                float* dst) {
  const int64_t bytes = kernels::RowBytes(s.dtype, s.stride) * i;
  kernels::ref::DequantizeRow(s.dtype, static_cast<const uint8_t*>(base) + bytes,
                          hd, dst);
}

absl::StatusOr<HeadRows> GatherRows(const ClusteredKvStore& store, int layer,
                                    int kv_head, int64_t n) {
  const int hd = store.shape().head_dim;
  HeadRows rows;
  rows.k.assign(size_t{1} * n * hd, 0.0f);
  rows.v.assign(size_t{1} * n * hd, 0.0f);
  std::vector<char> seen(n, 0);
  for (const kernels::KvSpan& s : store.HostSpans(layer, kv_head)) {
    for (int64_t r = 0; r < s.count; ++r) {
      const int64_t i = s.rows != nullptr ? s.rows[r] : r;
      const int64_t pos = kernels::SpanRowPosition(s, r);
      if (pos < 0 || pos >= n) continue;
      RowToFloat(s, s.k, i, hd, &rows.k[pos * hd]);
      RowToFloat(s, s.v, i, hd, &rows.v[pos * hd]);
      seen[pos] = 1;
    }
  }
  for (int64_t p = 0; p < n; ++p) {
    if (!seen[p]) {
      return absl::InternalError(
          absl::StrCat("layer ", layer, " KV head ", kv_head,
                       ": no stored row for position ", p));
    }
  }
  return rows;
}

std::vector<double> Scores(const float* q, const std::vector<float>& keys,
                           int hd) {
  std::vector<double> s(keys.size() / hd);
  for (size_t p = 0; p < s.size(); ++p) {
    double acc = 0;
    for (int d = 0; d < hd; ++d) acc += double{q[d]} * keys[p * hd + d];
    s[p] = acc;
  }
  return s;
}

// The measures of one query head.
struct HeadResult {
  double topk_recall = 0, mass_recall = 0;
  int64_t attended = 0;
};

// Measures one query head against `rows` (positions 0..q_pos) and appends
// its sparse and dense attention outputs to o_s and o_d.
HeadResult MeasureHead(const DecodeRecord& r, int64_t budget,
                       const std::vector<int64_t>& selected, const float* q,
                       const HeadRows& rows, int hd, std::vector<double>* o_s,
                       std::vector<double>* o_d) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const std::vector<double> scores = Scores(q, rows.k, hd);
  const int64_t n = static_cast<int64_t>(scores.size());
  const int64_t cb = std::min(r.clustered_begin, n);
  const int64_t ce = std::clamp(r.clustered_end, cb, n);
  // Attended: everything outside [cb, ce), plus the selection inside it.
  std::vector<char> mask(n, 1);
  std::vector<int64_t> chosen;
  if (!r.dense) {
    std::fill(mask.begin() + cb, mask.begin() + ce, 0);
    for (int64_t p : selected) {
      if (p >= cb && p < ce) mask[p] = 1;
    }
  }
  for (int64_t p = cb; p < ce; ++p) {
    if (mask[p]) chosen.push_back(p);
  }
  const std::vector<double> clustered(scores.begin() + cb, scores.begin() + ce);
  std::vector<int64_t> truth =
      TopKIndices(clustered, std::min<int64_t>(budget, ce - cb));
  for (int64_t& t : truth) t += cb;
  HeadResult h;
  h.topk_recall = RecallOf(truth, chosen);
  h.mass_recall = MaskedMass(Softmax(scores, scale), mask);
  h.attended = std::count(mask.begin(), mask.end(), 1);
  const auto sparse = AttentionOutput(scores, &mask, rows.v, hd, scale);
  const auto dense = AttentionOutput(scores, nullptr, rows.v, hd, scale);
  o_s->insert(o_s->end(), sparse.begin(), sparse.end());
  o_d->insert(o_d->end(), dense.begin(), dense.end());
  return h;
}

}  // namespace

absl::StatusOr<LayerQuality> MeasureLastDecode(const ClusteredKvStore& store,
                                               int layer) {
  const KvShape& sh = store.shape();
  if (layer < 0 || layer >= sh.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no layer ", layer));
  }
  const DecodeRecord& r = store.decode_record(layer);
  if (!r.valid) {
    return absl::FailedPreconditionError(
        absl::StrCat("no decode step of layer ", layer, " was recorded"));
  }
  const int hd = sh.head_dim;
  const int64_t budget = store.config().budget;
  LayerQuality out;
  out.layer = layer;
  out.k = std::min<int64_t>(budget, r.clustered_end - r.clustered_begin);
  std::vector<double> o_s, o_d;
  for (int g = 0; g < sh.n_kv_heads; ++g) {
    auto rows = GatherRows(store, layer, g, r.q_pos + 1);
    if (!rows.ok()) return rows.status();
    for (int h = g * sh.group(); h < (g + 1) * sh.group(); ++h) {
      const HeadResult hr =
          MeasureHead(r, budget, store.selected_positions(layer, h),
                      &r.q[size_t{1} * h * hd], *rows, hd, &o_s, &o_d);
      out.head_topk_recall.push_back(hr.topk_recall);
      out.head_mass_recall.push_back(hr.mass_recall);
      out.attended += hr.attended;
    }
  }
  const double heads = sh.n_heads;
  out.topk_recall = std::accumulate(out.head_topk_recall.begin(),
                                    out.head_topk_recall.end(), 0.0) /
                    heads;
  out.mass_recall = std::accumulate(out.head_mass_recall.begin(),
                                    out.head_mass_recall.end(), 0.0) /
                    heads;
  out.output_rel_err = RelativeError(o_s, o_d);
  return out;
}

}  // namespace ckv
