// Where a recorded decode step's clusterkv selection left the keys of a span
// of positions, e.g. a needle's tokens (issue 32 §3: the needle's cluster
// rank and the purity of its cluster). For each query head of a layer >=
// dense_layers whose last decode Select was recorded
// (ClusteredKvStore::set_record_selection or RecordNextDecode), and each
// position of the span:
//   - the key's dense weight (softmax(q.K / sqrt(d)) over every position up
//     to the query) and its rank among the clustered keys by q.k;
//   - the k-means cluster holding it, that cluster's rank among every
//     cluster of the (layer, KV head) by the score clusterkv orders them
//     with (q.centroid from the F16 centroid panels, ScoreBefore ties; the
//     group's summed query for gqa_selection = per_kv_head), the tokens of
//     the clusters ranked ahead of it (what a budget must exceed before the
//     cluster is reached), its size and how many of its members lie in the
//     span (its purity with respect to the span);
//   - whether the recorded step attended it.
// Sinks and tail rows are always attended and have no cluster.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/kv/clustered_store.h"

namespace ckv {

struct SpanKey {
  int64_t pos = 0;
  double score = 0;           // q.k (unscaled)
  double weight = 0;          // dense attention weight of the key
  int64_t key_rank = -1;      // among the clustered keys by q.k (0: best)
  int32_t segment = -1;       // -1: a sink or tail row (no cluster)
  int32_t cluster = -1;       // -1: also when the segment has no k-means index
  int64_t cluster_rank = -1;  // 0: the cluster clusterkv takes first
  int64_t tokens_ahead = 0;   // members of the clusters ranked ahead
  int64_t cluster_size = 0;
  int64_t span_members = 0;  // members of the cluster inside the span
  float cluster_score = 0;   // the score it was ranked by
  bool selected = false;     // attended by the recorded step
};

struct SpanHeadProbe {
  int head = 0;
  // Index into keys of the span key with the largest dense weight (the
  // token a copy head retrieves); -1 when the span is empty.
  int64_t target = -1;
  double span_weight = 0;  // dense attention weight of the whole span
  int64_t clusters = 0;    // clusters of the (layer, KV head), all segments
  int64_t clustered = 0;   // clustered keys up to the query
  float top_cluster_score = 0;  // score of the cluster ranked first
  std::vector<SpanKey> keys;    // positions [begin, end) in order
};

// Probes the last recorded decode Select of `layer` for the positions
// [begin, end), clamped to the positions up to the query. Reads the host
// tier as it is now (as MeasureLastDecode does); not concurrently with
// store calls. FAILED_PRECONDITION when no decode Select of the layer was
// recorded; INVALID_ARGUMENT for a bad layer or begin > end.
absl::StatusOr<std::vector<SpanHeadProbe>> ProbeSpan(
    const ClusteredKvStore& store, int layer, int64_t begin, int64_t end);

}  // namespace ckv
