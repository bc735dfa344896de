#include "server/recall_sampler.h"

#include <utility>

#include "model/kv/recall_probe.h"

namespace ckv::server {

RecallSampler::RecallSampler(int every, Sink sink)
    : every_(every > 0 ? every : 0), sink_(std::move(sink)) {}

void RecallSampler::BeforeDecode(ClusteredKvStore& store) {
  if (every_ == 0) return;
  const int64_t q_pos = store.num_tokens();
  if (q_pos % every_ != 0) return;
  const int layer = RecallProbeLayer(
      store.shape().n_layers, store.config().dense_layers, q_pos / every_);
  if (layer < 0 || !ArmRecallProbe(store, layer)) return;
  armed_.push_back({&store, layer, q_pos});
}

void RecallSampler::AfterStep(bool step_ok) {
  for (const Armed& a : armed_) {
    if (!step_ok) {
      a.store->RecordNextDecode(-1);
      continue;
    }
    auto s = CollectRecallProbe(*a.store, a.layer, a.q_pos);
    if (!s.ok()) {
      ++failures_;
      continue;
    }
    ++samples_;
    if (sink_) {
      sink_(KvPolicyName(a.store->config().policy), s->topk_recall,
            s->mass_recall);
    }
  }
  armed_.clear();
}

}  // namespace ckv::server
