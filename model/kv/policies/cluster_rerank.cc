#include "model/kv/policies/cluster_rerank.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/cluster_ops.h"

namespace ckv {

const std::vector<int32_t>& ClusterRerank::Rank(
    const PlanContext& ctx, kernels::DType kv_dtype, const float* const* qs,
    int n_q, const std::vector<Candidate>& candidates) {
  const int hd = ctx.head_dim;
  const auto& segs = *ctx.segments;
  const int n_c = static_cast<int>(candidates.size());
  first_row_.assign(n_c + 1, 0);
  for (int c = 0; c < n_c; ++c) {
    first_row_[c + 1] = first_row_[c] + candidates[c].rows;
  }
  const int64_t total = first_row_.back();
  q_.resize(static_cast<size_t>(n_q) * hd);
  for (int j = 0; j < n_q; ++j) std::copy_n(qs[j], hd, q_.data() + j * hd);
  scores_.resize(static_cast<size_t>(n_q) * total);
  for (int c = 0; c < n_c; ++c) {
    const Candidate& cand = candidates[c];
    const Segment& seg = *segs[cand.segment];
    const HeadIndex& h = seg.layer(ctx.layer).heads[ctx.kv_head];
    const uint16_t* keys = seg.keys(ctx.layer, ctx.kv_head);
    const int32_t first = h.offsets[cand.id];
    // Stored by cluster: the members are the stored rows [first, ...);
    // in position order, a member (a segment row) is its stored row.
    const int32_t* rows =
        h.rows_by_cluster() ? nullptr : h.members.data() + first;
    const uint16_t* base =
        h.rows_by_cluster() ? keys + static_cast<int64_t>(first) * hd : keys;
    kernels::cpu::KeyScores(q_.data(), n_q, base, kv_dtype, hd, rows, cand.rows,
                            hd, scores_.data() + first_row_[c], total);
  }
  // Float exponentials (a double exp per candidate key and query was as
  // dear as scoring the keys); a row's mass is summed in double.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  row_mass_.assign(total, 0.0);
  for (int j = 0; j < n_q; ++j) {
    const float* s = scores_.data() + j * total;
    float m = -INFINITY;
    for (int64_t i = 0; i < total; ++i) m = std::max(m, s[i]);
    if (!std::isfinite(m)) continue;  // no finite score: no mass
    for (int64_t i = 0; i < total; ++i) {
      const float x = std::exp((s[i] - m) * scale);
      row_mass_[i] += std::isnan(x) ? 0.0 : x;
    }
  }
  mass_.assign(n_c, 0.0);
  for (int c = 0; c < n_c; ++c) {
    for (int64_t i = first_row_[c]; i < first_row_[c + 1]; ++i) {
      mass_[c] += row_mass_[i];
    }
    mass_[c] /= candidates[c].rows;
  }
  order_.resize(n_c);
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int32_t a, int32_t b) { return mass_[a] > mass_[b]; });
  return order_;
}

int32_t ClusterRerank::BestWindow(int32_t c, int32_t take) const {
  const double* m = row_mass_.data() + first_row_[c];
  const int32_t rows = static_cast<int32_t>(first_row_[c + 1] - first_row_[c]);
  double sum = 0.0;
  for (int32_t i = 0; i < take; ++i) sum += m[i];
  double best = sum;
  int32_t best_begin = 0;
  for (int32_t b = 1; b + take <= rows; ++b) {
    sum += m[b + take - 1] - m[b - 1];
    if (sum > best) {
      best = sum;
      best_begin = b;
    }
  }
  return best_begin;
}

}  // namespace ckv
