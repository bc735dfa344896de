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
      (config_.cache_mode != CacheMode::kZeroCopy && !copy_on_device_)) {
    return false;
  }
  // Residency holds for the step once asked (CacheRows::Use); rows not
  // resident must be in the arena's own (mapped pinned) memory, which the
  // device reads in place. A device cache fetches its misses from there
  // (on the planner's stream, which resident uploads do not order).
  const int64_t hd = shape_.head_dim;
  for (const Segment* s : seg_view_) {
    if (!copy_on_device_ && Resident(*s, layer) != nullptr) continue;
    const int64_t bytes = int64_t{2} * shape_.n_kv_heads * s->size() * hd;
    if (!env_.arena->Contains(s->keys(layer, 0), bytes) ||
        !env_.arena->Contains(s->values(layer, 0), bytes)) {
      return false;
    }
  }
  return true;
}

void ClusteredKvStore::MakeDeviceCaches() {
  cache_copies_rows_ = config_.cache_mode == CacheMode::kCopy;
  if (!cache_copies_rows_ || planner_ == nullptr ||
      !planner_->BuildsRowLists() || env_.cache_rows == nullptr) {
    return;
  }
  device_caches_.resize(shape_.n_layers);
  for (int l = 0; l < shape_.n_layers; ++l) {
    if (!IsSparseLayer(l)) continue;
    for (int g = 0; g < shape_.n_kv_heads; ++g) {
      auto cache =
          planner_->NewBlockCache(shape_.head_dim, config_.cache_steps);
      if (cache == nullptr) {
        device_caches_.clear();
        return;
      }
      device_caches_[l].push_back(std::move(cache));
    }
  }
  copy_on_device_ = true;
  cache_copies_rows_ = false;
}

void ClusteredKvStore::FillCacheRequest(int layer, DeviceRowLists* lists) {
  lists->caches.clear();
  for (const auto& c : device_caches_[layer]) lists->caches.push_back(c.get());
  lists->cache_step = steps_[layer];  // SelectListed's step
  lists->seg_keys.clear();
  lists->seg_values.clear();
  for (const Segment* s : seg_view_) {
    for (int g = 0; g < shape_.n_kv_heads; ++g) {
      lists->seg_keys.push_back(s->keys(layer, g));
      lists->seg_values.push_back(s->values(layer, g));
    }
  }
}

// Per query head: the sinks, its list over its KV head's cache arena
// (plan order, the entries {0, n} of its range), the tail.
void ClusteredKvStore::SelectCacheListed(int layer, AttendSet* out) {
  const ListedSelect& ls = listed_[layer];
  const int group = shape_.group();
  const bool shared = config_.gqa_selection == GqaSelection::kPerKvHead;
  out->spans.clear();
  out->spans.reserve(size_t{3} * shape_.n_heads);
  for (int h = 0; h < shape_.n_heads; ++h) {
    const int g = h / group;
    const size_t list = size_t{1} * g * ls.lists.nq + (shared ? 0 : h % group);
    out->spans.push_back(SinkSpan(layer, g, true));
    kernels::KvSpan sel;
    sel.k = reinterpret_cast<const uint16_t*>(ls.lists.arena_keys[g]);
    sel.v = reinterpret_cast<const uint16_t*>(ls.lists.arena_values[g]);
    sel.rows_extent = ls.lists.arena_rows[g];
    sel.dtype = config_.kv_dtype;
    sel.stride = shape_.head_dim;
    sel.count = ls.lists.cap;
    sel.rows = reinterpret_cast<const int32_t*>(ls.lists.rows[list]);
    sel.positions = reinterpret_cast<const int64_t*>(ls.lists.positions[list]);
    sel.device_range = reinterpret_cast<const int64_t*>(ls.lists.ranges[list]);
    out->spans.push_back(sel);
    out->spans.push_back(OpenSpan(layer, g, true));
  }
  out->per_head.resize(shape_.n_heads);
  for (int h = 0; h < shape_.n_heads; ++h) {
    out->per_head[h] = {&out->spans[size_t{3} * h], 3};
  }
}

void ClusteredKvStore::SelectListed(int layer, AttendSet* out) {
  ListedSelect& ls = listed_[layer];
  ls.step = steps_[layer]++;
  ls.pending = true;
  ++timings_.calls;
  if (copy_on_device_) {
    SelectCacheListed(layer, out);
    return;
  }
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
