#include "model/kv/span_probe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/ops.h"
#include "model/kv/selection.h"

namespace ckv {
namespace {

// q.k in double for every position [0, n) of one (layer, KV head); NaN
// for a position with no stored row.
std::vector<double> KeyScores(const ClusteredKvStore& store, int layer,
                              int kv_head, const float* q, int64_t n) {
  const int hd = store.shape().head_dim;
  std::vector<double> scores(n, std::numeric_limits<double>::quiet_NaN());
  std::vector<float> k(hd);
  for (const kernels::KvSpan& s : store.HostSpans(layer, kv_head)) {
    const int64_t row_bytes = kernels::RowBytes(s.dtype, s.stride);
    for (int64_t r = 0; r < s.count; ++r) {
      const int64_t pos = kernels::SpanRowPosition(s, r);
      if (pos < 0 || pos >= n) continue;
      const int64_t i = s.rows != nullptr ? s.rows[r] : r;
      kernels::ref::DequantizeRow(
          s.dtype, static_cast<const uint8_t*>(s.k) + row_bytes * i, hd,
          k.data());
      double acc = 0;
      for (int d = 0; d < hd; ++d) acc += double{q[d]} * k[d];
      scores[pos] = acc;
    }
  }
  return scores;
}

// One cluster of one segment, as clusterkv ranks it.
struct RankedCluster {
  int64_t rank = 0;
  int64_t tokens_ahead = 0;
  int64_t size = 0;
  float score = 0;
};

// The clusters of (layer, kv_head) in the recorded segments, ranked in
// ScoreBefore order of the scores of `q`: ranked[s][c].
std::vector<std::vector<RankedCluster>> RankClusters(
    const std::vector<const Segment*>& segs, int layer, int kv_head,
    const float* q, int hd) {
  std::vector<std::vector<RankedCluster>> ranked(segs.size());
  std::vector<ScoredBlock> order;
  std::vector<float> scores;
  for (size_t s = 0; s < segs.size(); ++s) {
    const auto& heads = segs[s]->layer(layer).heads;
    if (heads.empty() || heads[kv_head].k == 0) continue;
    const HeadIndex& h = heads[kv_head];
    scores.resize(h.k);
    kernels::cpu::CentroidScoresMulti(q, 1, h.centroid_panels.data(), h.k, hd,
                                      scores.data(), h.k);
    ranked[s].resize(h.k);
    for (int c = 0; c < h.k; ++c) {
      const float x = std::isnan(scores[c])
                          ? -std::numeric_limits<float>::infinity()
                          : scores[c];
      ranked[s][c].score = x;
      ranked[s][c].size = h.offsets[c + 1] - h.offsets[c];
      order.push_back({x, static_cast<int32_t>(s), c});
    }
  }
  std::sort(order.begin(), order.end(), kScoreBefore);
  int64_t ahead = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    RankedCluster& c = ranked[order[i].segment][order[i].id];
    c.rank = static_cast<int64_t>(i);
    c.tokens_ahead = ahead;
    ahead += c.size;
  }
  return ranked;
}

// Cluster of each row of a segment's (layer, kv_head); empty without an
// index.
std::vector<int32_t> ClusterOfRows(const Segment& seg, int layer, int kv_head) {
  const auto& heads = seg.layer(layer).heads;
  if (heads.empty() || heads[kv_head].k == 0) return {};
  const HeadIndex& h = heads[kv_head];
  std::vector<int32_t> of(seg.size(), -1);
  for (int c = 0; c < h.k; ++c) {
    for (int32_t j = h.offsets[c]; j < h.offsets[c + 1]; ++j) {
      of[h.members[j]] = c;
    }
  }
  return of;
}

}  // namespace

absl::StatusOr<std::vector<SpanHeadProbe>> ProbeSpan(
    const ClusteredKvStore& store, int layer, int64_t begin, int64_t end) {
  const KvShape& sh = store.shape();
  if (layer < 0 || layer >= sh.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no layer ", layer));
  }
  if (begin < 0 || begin > end) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad span [", begin, ", ", end, ")"));
  }
  const DecodeRecord& r = store.decode_record(layer);
  if (!r.valid) {
    return absl::FailedPreconditionError(
        absl::StrCat("no decode step of layer ", layer, " was recorded"));
  }
  const int hd = sh.head_dim, group = sh.group();
  const int64_t n = r.q_pos + 1;
  end = std::min(end, n);
  begin = std::min(begin, end);
  const int64_t cb = std::min(r.clustered_begin, n);
  const int64_t ce = std::clamp(r.clustered_end, cb, n);
  // The segments the step selected from (a window may have closed since).
  std::vector<const Segment*> segs;
  for (const auto& s : store.segments()) {
    if (s->first_pos() >= cb && s->first_pos() + s->size() <= ce) {
      segs.push_back(s.get());
    }
  }
  const bool shared = store.config().gqa_selection == GqaSelection::kPerKvHead;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<SpanHeadProbe> out;
  std::vector<float> q_sum(hd);
  for (int g = 0; g < sh.n_kv_heads; ++g) {
    std::vector<std::vector<int32_t>> cluster_of(segs.size());
    for (size_t s = 0; s < segs.size(); ++s) {
      cluster_of[s] = ClusterOfRows(*segs[s], layer, g);
    }
    // per_kv_head: the group's summed query, summed as clusterkv sums it.
    std::fill(q_sum.begin(), q_sum.end(), 0.0f);
    for (int i = 0; i < group; ++i) {
      const float* qi = &r.q[size_t{1} * (g * group + i) * hd];
      for (int d = 0; d < hd; ++d) q_sum[d] += qi[d];
    }
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const float* q = &r.q[size_t{1} * h * hd];
      const std::vector<double> scores = KeyScores(store, layer, g, q, n);
      for (int64_t p = 0; p < n; ++p) {
        if (std::isnan(scores[p])) {
          return absl::InternalError(
              absl::StrCat("layer ", layer, " KV head ", g,
                           ": no stored row for position ", p));
        }
      }
      const auto ranked =
          RankClusters(segs, layer, g, shared ? q_sum.data() : q, hd);
      // Dense weights over every position up to the query.
      const double m = *std::max_element(scores.begin(), scores.end());
      double z = 0;
      for (double x : scores) z += std::exp(scale * (x - m));
      std::vector<double> clustered(scores.begin() + cb, scores.begin() + ce);
      std::sort(clustered.begin(), clustered.end(), std::greater<double>());
      const std::vector<int64_t>& sel = store.selected_positions(layer, h);
      SpanHeadProbe probe;
      probe.head = h;
      probe.clustered = ce - cb;
      probe.top_cluster_score = -std::numeric_limits<float>::infinity();
      for (const auto& seg_clusters : ranked) {
        probe.clusters += static_cast<int64_t>(seg_clusters.size());
        for (const RankedCluster& c : seg_clusters) {
          if (c.rank == 0) probe.top_cluster_score = c.score;
        }
      }
      for (int64_t p = begin; p < end; ++p) {
        SpanKey k;
        k.pos = p;
        k.score = scores[p];
        k.weight = std::exp(scale * (scores[p] - m)) / z;
        probe.span_weight += k.weight;
        const bool in_clustered = p >= cb && p < ce;
        k.selected = r.dense || !in_clustered ||
                     std::find(sel.begin(), sel.end(), p) != sel.end();
        if (in_clustered) {
          // Keys scoring strictly better (ties: the lower position wins,
          // which this count treats as ahead, i.e. a pessimistic rank).
          k.key_rank = std::upper_bound(clustered.begin(), clustered.end(),
                                        scores[p], std::greater<double>()) -
                       clustered.begin() - 1;
        }
        for (size_t s = 0; s < segs.size() && in_clustered; ++s) {
          const int64_t row = p - segs[s]->first_pos();
          if (row < 0 || row >= segs[s]->size()) continue;
          k.segment = static_cast<int32_t>(s);
          if (cluster_of[s].empty()) break;
          k.cluster = cluster_of[s][row];
          const RankedCluster& c = ranked[s][k.cluster];
          k.cluster_rank = c.rank;
          k.tokens_ahead = c.tokens_ahead;
          k.cluster_size = c.size;
          k.cluster_score = c.score;
          break;
        }
        probe.keys.push_back(k);
      }
      // Purity: how many span keys share each key's cluster.
      for (SpanKey& k : probe.keys) {
        if (k.cluster < 0) continue;
        k.span_members = std::count_if(
            probe.keys.begin(), probe.keys.end(), [&](const SpanKey& o) {
              return o.segment == k.segment && o.cluster == k.cluster;
            });
      }
      for (size_t i = 0; i < probe.keys.size(); ++i) {
        if (probe.target < 0 ||
            probe.keys[i].weight > probe.keys[probe.target].weight) {
          probe.target = static_cast<int64_t>(i);
        }
      }
      out.push_back(std::move(probe));
    }
  }
  return out;
}

}  // namespace ckv
