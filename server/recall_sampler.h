// Live recall telemetry (issue 15): the engine loop samples one decode step
// in `every` per session and measures, for one sparse layer, how much of
// exact attention the session's selection kept (model/kv/recall_probe.h).
// A session's step is sampled when the position of its query token is a
// multiple of `every`, so sampling is per session, needs no state across
// jobs, and sessions at different lengths are sampled in different steps.
// Sample k (= position / every) measures sparse layer
// dense_layers + k mod (n_layers - dense_layers). Steps with nothing
// clustered yet are not sampled (nothing was selected from).
//
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/kv/clustered_store.h"

namespace ckv::server {

class RecallSampler {
 public:
  // Receives each sample: the session's policy name (KvPolicyName) and its
  // top-k and attention-mass recall (means over query heads, 0..1).
  using Sink = std::function<void(absl::string_view policy, double topk_recall,
                                  double mass_recall)>;

  // every <= 0: off (nothing is armed or reported).
  RecallSampler(int every, Sink sink);

  // Before a batch step, for each single-token decode step in it: arms
  // `store` when the step at position store.num_tokens() is sampled.
  void BeforeDecode(ClusteredKvStore& store);
  // After the step (before any job finishes, so the armed stores are
  // alive): measures and reports each armed store, then disarms them all.
  // step_ok false: disarms only.
  void AfterStep(bool step_ok);

  int every() const { return every_; }
  int64_t samples() const { return samples_; }    // reported so far
  int64_t failures() const { return failures_; }  // armed, not measurable

 private:
  struct Armed {
    ClusteredKvStore* store;
    int layer;
    int64_t q_pos;
  };
  const int every_;
  const Sink sink_;
  std::vector<Armed> armed_;
  int64_t samples_ = 0;
  int64_t failures_ = 0;
};

}  // namespace ckv::server
