// Live recall sampling of one decode step (issue 15, "Live recall
// telemetry"): a store is armed before a decode step so that the step
// records one sparse layer's selection (ClusteredKvStore::RecordNextDecode),
// and after the step that layer is measured against exact attention over
// every stored token (model/kv/quality.h: top-k recall with k = budget over
// the clustered tokens, attention-mass recall over all tokens).
//
// Cost of one sample: the quality reference for one layer, i.e. converting
// every stored K/V row of the layer to float and a dense attention over
// them in double precision (server/recall_sampler.h states the default
// sampling rate this allows).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/kv/clustered_store.h"

namespace ckv {

struct RecallSample {
  int layer = 0;
  int64_t q_pos = 0;       // position of the sampled query token
  double topk_recall = 0;  // mean over query heads
  double mass_recall = 0;  // mean over query heads
};

// The layer sample number `sample_index` measures: rotates through the
// sparse layers [dense_layers, n_layers); -1 when the model has none.
int RecallProbeLayer(int n_layers, int dense_layers, int64_t sample_index);

// Arms `store` so that its next decode step records `layer`. Returns false
// (and arms nothing) when there is nothing to measure: an invalid layer or
// no clustered token yet (nothing was selected from).
bool ArmRecallProbe(ClusteredKvStore& store, int layer);

// Measures the step armed by ArmRecallProbe(store, layer) and disarms the
// store. `q_pos` is the position the step's query token was expected at:
// FAILED_PRECONDITION when no decode step of the layer at that position was
// recorded (e.g. the step failed). Errors of MeasureLastDecode pass through.
absl::StatusOr<RecallSample> CollectRecallProbe(ClusteredKvStore& store,
                                                int layer, int64_t q_pos);

}  // namespace ckv
