#include "model/kv/recall_probe.h"

#include "absl/strings/str_cat.h"
#include "model/kv/quality.h"

namespace ckv {

int RecallProbeLayer(int n_layers, int dense_layers, int64_t sample_index) {
  const int sparse = n_layers - dense_layers;
  if (dense_layers < 0 || sparse <= 0 || sample_index < 0) return -1;
  return dense_layers + static_cast<int>(sample_index % sparse);
}

bool ArmRecallProbe(ClusteredKvStore& store, int layer) {
  if (layer < store.config().dense_layers || layer >= store.shape().n_layers ||
      store.clustered_tokens() == 0) {
    return false;
  }
  store.RecordNextDecode(layer);
  return true;
}

absl::StatusOr<RecallSample> CollectRecallProbe(ClusteredKvStore& store,
                                                int layer, int64_t q_pos) {
  store.RecordNextDecode(-1);
  if (layer < 0 || layer >= store.shape().n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("no layer ", layer));
  }
  const DecodeRecord& r = store.decode_record(layer);
  if (!r.valid || r.q_pos != q_pos) {
    return absl::FailedPreconditionError(
        absl::StrCat("no decode step at position ", q_pos, " of layer ", layer,
                     " was recorded"));
  }
  auto q = MeasureLastDecode(store, layer);
  if (!q.ok()) return q.status();
  RecallSample s;
  s.layer = layer;
  s.q_pos = q_pos;
  s.topk_recall = q->topk_recall;
  s.mass_recall = q->mass_recall;
  return s;
}

}  // namespace ckv
