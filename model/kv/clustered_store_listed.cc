// ClusteredKvStore's sparse decode Selects over row lists a device planner
// builds on its device (model/kv/store_env.h DeviceRowLists): the Select
// names, per query head and segment, a span over the segment's rows —
// resident on the device, or pinned host rows it reads in place — whose
// entries the device writes, so the attention needs no plan on the host; the
// bookkeeping a host Select does from the plan (block cache statistics,
// recorded selections) waits for the plans, read back at the step's end
// (FinishSelect).
#include "model/kv/clustered_store.h"

namespace ckv {

bool ClusteredKvStore::ListsEligible(int layer) const {
  if (planner_ == nullptr || !planner_->BuildsRowLists() ||
      env_.cache_rows == nullptr ||
      config_.cache_mode != CacheMode::kZeroCopy) {
    return false;
  }
  // Residency holds for the step once asked (CacheRows::Use); rows not
  // resident must be in the arena's own (mapped pinned) memory, which the
  // device reads in place.
  const int64_t hd = shape_.head_dim;
  for (const Segment* s : seg_view_) {
    if (Resident(*s, layer) != nullptr) continue;
    const int64_t bytes = int64_t{2} * shape_.n_kv_heads * s->size() * hd;
    if (!env_.arena->Contains(s->keys(layer, 0), bytes) ||
        !env_.arena->Contains(s->values(layer, 0), bytes)) {
      return false;
    }
  }
  return true;
}

void ClusteredKvStore::SelectListed(int layer, AttendSet* out) {
  ListedSelect& ls = listed_[layer];
  ls.step = steps_[layer]++;
  ls.pending = true;
  ++timings_.calls;
  const int group = shape_.group();
  const int64_t hd = shape_.head_dim;
  const bool shared = config_.gqa_selection == GqaSelection::kPerKvHead;
  const size_t n_segs = ls.segments.size();
  const int per_head = 2 + static_cast<int>(n_segs);
  resident_view_.resize(n_segs);  // asked once per segment, not per head
  for (size_t s = 0; s < n_segs; ++s) {
    resident_view_[s] = Resident(*ls.segments[s], layer);
  }
  out->spans.clear();
  out->spans.reserve(size_t{1} * shape_.n_heads * per_head);
  for (int h = 0; h < shape_.n_heads; ++h) {
    const int g = h / group;
    const int j = shared ? 0 : h % group;
    const size_t list = size_t{1} * g * ls.lists.nq + j;
    out->spans.push_back(SinkSpan(layer, g, true));
    for (size_t s = 0; s < n_segs; ++s) {
      const Segment& seg = *ls.segments[s];
      const CacheRows* resident = resident_view_[s];
      const int64_t head = int64_t{g} * seg.size() * hd;
      kernels::KvSpan sel;
      sel.k = resident ? resident->keys() + head : seg.keys(layer, g);
      sel.v = resident ? resident->values() + head : seg.values(layer, g);
      sel.rows_extent = seg.size();
      sel.dtype = config_.kv_dtype;
      sel.stride = hd;
      sel.count = ls.lists.cap;
      sel.first_pos = seg.first_pos();
      sel.rows = reinterpret_cast<const int32_t*>(ls.lists.rows[list]);
      sel.positions =
          reinterpret_cast<const int64_t*>(ls.lists.positions[list]);
      sel.device_range =
          reinterpret_cast<const int64_t*>(ls.lists.ranges[list]) + 2 * s;
      out->spans.push_back(sel);
    }
    out->spans.push_back(OpenSpan(layer, g, true));
  }
  out->per_head.resize(shape_.n_heads);
  for (int h = 0; h < shape_.n_heads; ++h) {
    out->per_head[h] = {&out->spans[size_t{1} * h * per_head], per_head};
  }
}

void ClusteredKvStore::FinishSelect() {
  for (int l = 0; l < shape_.n_layers; ++l) FinishListed(l);
}

// The host Select's bookkeeping of a listed Select, from its plans: the
// block caches' statistics (zero-copy: accounting only) and the recorded
// positions. Without plans (a device error) there is nothing to count.
void ClusteredKvStore::FinishListed(int layer) {
  ListedSelect& ls = listed_[layer];
  if (!ls.pending) return;
  ls.pending = false;
  if (!ls.planned) return;
  const int group = shape_.group();
  const bool shared = config_.gqa_selection == GqaSelection::kPerKvHead;
  seg_view_ = ls.segments;
  plans_.swap(ls.plans);  // GatherRows and RecordSelected read plans_
  for (int g = 0; g < shape_.n_kv_heads; ++g) {
    BlockCache& cache = caches_[layer][g];
    for (int h = g * group; h < (g + 1) * group; ++h) {
      if (!shared || h == g * group) GatherRows(layer, g, h, ls.step, cache);
    }
    cache.EndStep(ls.step);
    if (!Records(layer)) continue;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      RecordSelected(layer, shared ? g * group : h, h);
    }
  }
  plans_.swap(ls.plans);
  ls.planned = false;
}

}  // namespace ckv
