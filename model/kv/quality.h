// Quality of sparse attention (docs/clusterkv.md, "Quality measures"): how
// much of what dense attention would use a decode step's selection actually
// attends.
//
// For one decode step at a layer >= dense_layers, with the step's query q per
// query head (recorded by the store) and the host-tier keys/values converted
// from F16/BF16 to float, per query head:
//   - top-k recall: k = min(B, clustered tokens); truth = the k clustered
//     tokens with the largest q.K; |truth ∩ selected| / k (the reference
//     implementation's `stat_topk`); 1 when nothing is clustered.
//   - attention-mass recall: the sum, over the attended tokens (sinks ∪
//     selected ∪ tail, incl. the query token), of softmax(q.K / sqrt(d)) taken
//     over ALL tokens up to the query position.
// Per layer: ‖o_sparse − o_dense‖ / ‖o_dense‖ over the concatenated head
// outputs, where o_dense attends every token and o_sparse only the attended
// ones (same q). Per step: KL(dense ‖ sparse) of the two logits rows and
// whether their argmax agrees.
//
// All sums are accumulated in double.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/kv/clustered_store.h"

namespace ckv {

// ------------------------------------------------- math on plain arrays

// Indices of the k largest scores (k clamped to [0, n]), ties broken toward
// the lower index, returned in ascending index order.
std::vector<int64_t> TopKIndices(const std::vector<double>& scores, int64_t k);

// |truth ∩ selected| / |truth|; 1 when truth is empty. Duplicates in either
// list count once.
double RecallOf(const std::vector<int64_t>& truth,
                const std::vector<int64_t>& selected);

// p_i = exp(scale * x_i) / sum_j exp(scale * x_j) (max-subtracted).
std::vector<double> Softmax(const std::vector<double>& x, double scale);

// Sum of probs[i] over i with mask[i] != 0. Sizes must match.
double MaskedMass(const std::vector<double>& probs,
                  const std::vector<char>& mask);

// Attention output of one head over the rows with mask[i] != 0 (all rows when
// mask is null): sum_i w_i v_i / sum_i w_i, w_i = exp(scale * scores_i).
// values is [scores.size()][head_dim]. Zeros when no row is attended.
std::vector<double> AttentionOutput(const std::vector<double>& scores,
                                    const std::vector<char>* mask,
                                    const std::vector<float>& values,
                                    int head_dim, double scale);

// ‖approx − exact‖₂ / ‖exact‖₂; 0 when both are zero, +inf when only exact
// is. Sizes must match.
double RelativeError(const std::vector<double>& approx,
                     const std::vector<double>& exact);

// KL(softmax(p) ‖ softmax(q)) in nats over n logits (rows of one step).
double LogitKl(const float* p, const float* q, int64_t n);

// Whether the first index of the maximum is the same in a and b (n > 0).
bool SameArgmax(const float* a, const float* b, int64_t n);

// ------------------------------------------------------ store measures

struct LayerQuality {
  int layer = 0;
  int64_t k = 0;              // top-k size: min(budget, clustered tokens)
  int64_t attended = 0;       // attended tokens, summed over query heads
  double topk_recall = 0;     // mean over query heads
  double mass_recall = 0;     // mean over query heads
  double output_rel_err = 0;  // over the layer's concatenated head outputs
  std::vector<double> head_topk_recall;  // [n_heads]
  std::vector<double> head_mass_recall;  // [n_heads]
};

// Measures the last recorded decode Select of `layer` (set_record_selection
// was on, layer >= dense_layers). Reads the store's host tier as it is now,
// so it may run after the step's Commit (every position up to the query is
// still stored, wherever its row moved); not concurrently with store calls.
// FAILED_PRECONDITION when no decode Select of the layer was recorded;
// INTERNAL when rows are missing.
absl::StatusOr<LayerQuality> MeasureLastDecode(const ClusteredKvStore& store,
                                               int layer);

}  // namespace ckv
