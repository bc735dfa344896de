#include "model/kv/clustered_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/kv/policies/registry.h"

namespace ckv {

namespace cpu = kernels::cpu;
using kernels::DType;

namespace {

// Nanoseconds since *t; moves *t to now.
int64_t Lap(std::chrono::steady_clock::time_point* t) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - *t).count();
  *t = now;
  return ns;
}

}  // namespace

ClusteredKvStore::ClusteredKvStore(const KvShape& shape,
                                   const KvStoreConfig& config,
                                   ClusterWorker* worker, StoreEnv env)
    : shape_(shape),
      config_(config),
      policy_(MakePolicy(config)),
      indexes_(BuiltIndexes(config)),
      worker_(config.async_clustering ? worker : nullptr),
      env_(std::move(env)),
      planner_(env_.planner && env_.planner->Plans(config) ? env_.planner.get()
                                                           : nullptr),
      listed_(shape.n_layers),
      sinks_(shape.n_layers),
      open_(shape.n_layers),
      sink_rows_(shape.n_layers, 0),
      open_rows_(shape.n_layers, 0),
      uncommitted_(shape.n_layers, 0),
      placed_(shape.n_layers),
      placed_filled_(shape.n_layers, 0),
      prompt_layer_due_(shape.n_layers, 0),
      open_first_pos_(config.sink_tokens),
      steps_(shape.n_layers, 0),
      plans_(shape.n_heads),
      sel_rows_(shape.n_heads),
      sel_pos_(shape.n_heads),
      sel_runs_(shape.n_heads),
      recorded_(shape.n_layers,
                std::vector<std::vector<int64_t>>(shape.n_heads)),
      decode_records_(shape.n_layers) {
  const size_t sink_elems =
      size_t{1} * shape.n_kv_heads * config.sink_tokens * shape.head_dim;
  for (auto& s : sinks_) {
    s.k.resize(sink_elems);
    s.v.resize(sink_elems);
    s.capacity = config.sink_tokens;
  }
  if (env_.cache_rows != nullptr) {  // sinks and tail mirrored there
    for (int l = 0; l < shape.n_layers; ++l) {
      sinks_[l].SetMirror(env_.cache_rows->NewRows(shape.head_dim));
      open_[l].SetMirror(env_.cache_rows->NewRows(shape.head_dim));
    }
  }
  MakeDeviceCaches();
  const bool copy = cache_copies_rows_;
  caches_.resize(shape.n_layers);
  for (auto& per_layer : caches_) {
    for (int h = 0; h < shape.n_kv_heads; ++h) {
      per_layer.emplace_back(
          shape.head_dim, config.cache_steps, config.quest_page_size, copy,
          copy && env_.cache_rows ? env_.cache_rows->NewRows(shape.head_dim)
                                  : nullptr);
    }
  }
}

bool ClusteredKvStore::IsSparseLayer(int layer) const {
  return policy_ != nullptr && policy_->selects() &&
         layer >= config_.dense_layers && shape_.window(layer) == 0;
}

bool ClusteredKvStore::NeedsIndex(int layer) const {
  return layer >= config_.dense_layers && shape_.window(layer) == 0 &&
         indexes_ != 0;
}

int64_t ClusteredKvStore::clustered_tokens() const {
  int64_t n = 0;
  for (const auto& s : segments_) n += s->size();
  return n;
}

// Every segment's job (urgent jobs overtake bulk ones: not just the last),
// from the first one not yet seen indexed; without `wait`, stops at the
// first pending one. Returns whether the layer is indexed.
bool ClusteredKvStore::AdvanceIndexed(int layer, bool wait) const {
  if (worker_ == nullptr) return true;
  if (indexed_upto_.size() < static_cast<size_t>(shape_.n_layers)) {
    indexed_upto_.resize(shape_.n_layers, 0);
  }
  size_t& upto = indexed_upto_[layer];
  for (; upto < segments_.size(); ++upto) {
    const int64_t ticket = segments_[upto]->layer(layer).ticket;
    if (wait) {
      worker_->Wait(ticket);
    } else if (!worker_->IsDone(ticket)) {
      return false;
    }
  }
  return true;
}

void ClusteredKvStore::WaitForIndex(int layer) const {
  AdvanceIndexed(layer, /*wait=*/true);
}

bool ClusteredKvStore::IndexReady() const {
  for (int l = 0; l < shape_.n_layers; ++l) {
    if (!AdvanceIndexed(l, /*wait=*/false)) return false;
  }
  return true;
}

int ClusteredKvStore::SegmentClusters(size_t i) const {
  const int l = config_.dense_layers;
  if (i >= segments_.size() || l >= shape_.n_layers || !IndexReady()) return 0;
  int k = 0;
  for (const auto& h : segments_[i]->layer(l).heads) k += h.k;
  return k;
}

// ------------------------------------------------------------- selecting

void ClusteredKvStore::SyncMirrors(int layer) {
  sinks_[layer].Sync(shape_.n_kv_heads, shape_.head_dim, sink_rows_[layer]);
  open_[layer].Sync(shape_.n_kv_heads, shape_.head_dim, open_rows_[layer]);
}

kernels::KvSpan ClusteredKvStore::SinkSpan(int layer, int kv_head,
                                           bool mirror) const {
  const RowBuffer& b = sinks_[layer];
  kernels::KvSpan s;
  // With sink_tokens 0 the buffer is empty (capacity 0) and the span has
  // no rows.
  s.k = b.keys(kv_head, shape_.head_dim, mirror);
  s.v = b.values(kv_head, shape_.head_dim, mirror);
  s.dtype = config_.kv_dtype;
  s.stride = shape_.head_dim;
  s.count = sink_rows_[layer];
  s.first_pos = 0;
  return s;
}

kernels::KvSpan ClusteredKvStore::OpenSpan(int layer, int kv_head,
                                           bool mirror) const {
  const RowBuffer& b = open_[layer];
  kernels::KvSpan s;
  s.k = b.keys(kv_head, shape_.head_dim, mirror);
  s.v = b.values(kv_head, shape_.head_dim, mirror);
  s.dtype = config_.kv_dtype;
  s.stride = shape_.head_dim;
  s.count = open_rows_[layer];
  s.first_pos = open_first_pos_;
  return s;
}

// Waits for the layer's index job first: it reorders the rows by cluster.
const CacheRows* ClusteredKvStore::Resident(const Segment& seg,
                                            int layer) const {
  return env_.cache_rows == nullptr ? nullptr
                                    : seg.ResidentRows(layer, *env_.cache_rows);
}

kernels::KvSpan ClusteredKvStore::SegmentSpan(const Segment& seg, int layer,
                                              int kv_head, bool mirror) const {
  if (worker_ != nullptr && seg.layer(layer).ticket != 0) {
    worker_->Wait(seg.layer(layer).ticket);
  }
  kernels::KvSpan s;
  const CacheRows* resident = mirror ? Resident(seg, layer) : nullptr;
  const int64_t head = int64_t{kv_head} * seg.size() * shape_.head_dim;
  s.k = resident ? resident->keys() + head : seg.keys(layer, kv_head);
  s.v = resident ? resident->values() + head : seg.values(layer, kv_head);
  s.dtype = config_.kv_dtype;
  s.stride = shape_.head_dim;
  s.count = seg.size();
  s.first_pos = seg.first_pos();
  s.row_positions = seg.row_positions(layer, kv_head);
  return s;
}

// Select's conditions for RecordDecode and for its sparse branch (which
// PrepareSelect's mirrors), whose plan reads the queries unless the
// policy plans from positions alone or the plan and its row lists were
// launched on the device (asked after PrepareSelect).
bool ClusteredKvStore::SelectReadsQueries(int layer, int64_t n_q) const {
  if (n_q != 1) return false;
  if (Records(layer) && layer >= config_.dense_layers) return true;
  if (listed_layer_ == layer && listed_[layer].lists.valid) return false;
  return IsSparseLayer(layer) && !segments_.empty() && policy_->reads_queries();
}

// Same condition as Select's sparse branch; the segments and the query
// stay as they are until the Select (Append does not close segments).
void ClusteredKvStore::PrepareSelect(int layer, const LayerQuery& query) {
  preplanned_ = false;
  preplanned_layer_ = -1;
  listed_layer_ = -1;
  if (planner_ == nullptr || query.n_q != 1 || !IsSparseLayer(layer) ||
      segments_.empty()) {
    return;
  }
  WaitForIndex(layer);
  seg_view_.clear();
  for (const auto& s : segments_) seg_view_.push_back(s.get());
  if (ListsEligible(layer)) {
    FinishListed(layer);  // a previous step's, if its end never came
    ListedSelect& ls = listed_[layer];
    ls.plans.resize(shape_.n_heads);
    ls.segments = seg_view_;
    listed_layer_ = layer;
    if (copy_on_device_) FillCacheRequest(layer, &ls.lists);
    planner_->Queue(config_, shape_, ls.segments, layer, query.q,
                    ls.plans.data(), &ls.planned, &ls.lists);
    return;
  }
  preplanned_layer_ = layer;
  planner_->Queue(config_, shape_, seg_view_, layer, query.q, plans_.data(),
                  &preplanned_, nullptr);
}

void ClusteredKvStore::Select(int layer, const LayerQuery& query,
                              AttendSet* out) {
  out->Clear();
  SyncMirrors(layer);
  const bool sparse =
      query.n_q == 1 && IsSparseLayer(layer) && !segments_.empty();
  if (Records(layer) && query.n_q == 1 && layer >= config_.dense_layers) {
    RecordDecode(layer, query, !sparse);
  }
  if (sparse && listed_layer_ == layer && listed_[layer].lists.valid) {
    SelectListed(layer, out);
  } else if (sparse) {
    SelectSparse(layer, query, out);
  } else {
    SelectDense(layer, out);
  }
  const int64_t window = shape_.window(layer);
  if (window > 0 && query.n_q > 0) {  // sliding window: its rows only
    const int64_t min_pos = WindowStart(query.q_pos, query.n_q, window);
    for (kernels::KvSpan& s : out->spans) s = SpanFrom(s, min_pos);
  }
}

void ClusteredKvStore::RecordDecode(int layer, const LayerQuery& query,
                                    bool dense) {
  DecodeRecord& r = decode_records_[layer];
  r.valid = true;
  r.dense = dense;
  r.q_pos = query.q_pos[0];
  r.clustered_begin = config_.sink_tokens;
  r.clustered_end = open_first_pos_;
  r.q.assign(query.q, query.q + size_t{1} * shape_.n_heads * shape_.head_dim);
}

void ClusteredKvStore::RecordNextDecode(int layer) {
  record_layer_ = layer;
  if (layer >= 0 && layer < shape_.n_layers) {
    decode_records_[layer].valid = false;
  }
}

std::vector<kernels::KvSpan> ClusteredKvStore::HostSpans(int layer,
                                                         int kv_head) const {
  std::vector<kernels::KvSpan> spans{SinkSpan(layer, kv_head, false)};
  for (const auto& seg : segments_) {
    spans.push_back(SegmentSpan(*seg, layer, kv_head, false));
  }
  spans.push_back(OpenSpan(layer, kv_head, false));
  return spans;
}

void ClusteredKvStore::SelectDense(int layer, AttendSet* out) {
  const int per_head = 2 + static_cast<int>(segments_.size());
  for (int g = 0; g < shape_.n_kv_heads; ++g) {
    out->spans.push_back(SinkSpan(layer, g, true));
    for (const auto& seg : segments_) {
      out->spans.push_back(SegmentSpan(*seg, layer, g, true));
    }
    out->spans.push_back(OpenSpan(layer, g, true));
  }
  out->per_head.resize(shape_.n_heads);
  for (int h = 0; h < shape_.n_heads; ++h) {
    out->per_head[h] = {&out->spans[(h / shape_.group()) * per_head], per_head};
  }
}

// Plans every query head of `layer` into plans_ (per_kv_head: one plan of
// the group's queries, copied to each head of the group).
void ClusteredKvStore::PlanHeads(int layer, const float* q) {
  const bool batched = preplanned_ && preplanned_layer_ == layer;
  preplanned_ = false;
  preplanned_layer_ = -1;
  if (batched) return;  // RunQueued planned it
  if (planner_ != nullptr && planner_->PlanLayer(config_, shape_, seg_view_,
                                                 layer, q, plans_.data())) {
    return;
  }
  const int hd = shape_.head_dim, group = shape_.group();
  const bool shared = config_.gqa_selection == GqaSelection::kPerKvHead;
  for (int g = 0; g < shape_.n_kv_heads; ++g) {
    const PlanContext ctx{&seg_view_, layer, g, hd};
    plan_qs_.clear();
    for (int i = 0; i < group; ++i) {  // null for a policy that reads none
      plan_qs_.push_back(q == nullptr ? nullptr
                                      : q + size_t{1} * (g * group + i) * hd);
    }
    if (!shared) {
      policy_->PlanEach(ctx, plan_qs_.data(), group, &plans_[g * group]);
      continue;
    }
    policy_->Plan(ctx, plan_qs_.data(), group, &plans_[g * group]);
    for (int j = 1; j < group; ++j) plans_[g * group + j] = plans_[g * group];
  }
}

void ClusteredKvStore::SelectSparse(int layer, const LayerQuery& query,
                                    AttendSet* out) {
  auto t = std::chrono::steady_clock::now();
  WaitForIndex(layer);
  timings_.wait_ns += Lap(&t);
  seg_view_.clear();
  for (const auto& s : segments_) seg_view_.push_back(s.get());
  // A decoding session keeps every segment of the layer in use on the
  // device (made resident while the budget allows), not only the ones
  // this step selects: residency follows sessions, not single steps.
  // Asked once per step; the selected spans read resident_view_.
  resident_view_.assign(seg_view_.size(), nullptr);
  if (env_.cache_rows != nullptr && !cache_copies_rows_) {
    for (size_t i = 0; i < seg_view_.size(); ++i) {
      resident_view_[i] = Resident(*seg_view_[i], layer);
    }
  }
  PlanHeads(layer, query.q);
  timings_.plan_ns += Lap(&t);
  ++timings_.calls;
  const int group = shape_.group();
  const bool shared = config_.gqa_selection == GqaSelection::kPerKvHead;
  const int64_t step = steps_[layer]++;
  out->spans.clear();
  out->per_head.assign(shape_.n_heads, {});
  first_span_.resize(shape_.n_heads);
  for (int g = 0; g < shape_.n_kv_heads; ++g) {
    BlockCache& cache = caches_[layer][g];
    for (int h = g * group; h < (g + 1) * group; ++h) {
      if (!shared || h == g * group) GatherRows(layer, g, h, step, cache);
    }
    cache.EndStep(step);
    // Arena pointers are stable only after the group's last Ensure.
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const int src = shared ? g * group : h;  // same arrays: shared tiles
      first_span_[h] = out->spans.size();
      out->spans.push_back(SinkSpan(layer, g, true));
      AddSelectedSpans(layer, g, src, cache, &out->spans);
      out->spans.push_back(OpenSpan(layer, g, true));
      if (Records(layer)) RecordSelected(layer, src, h);
    }
  }
  for (int h = 0; h < shape_.n_heads; ++h) {
    const size_t end =
        h + 1 < shape_.n_heads ? first_span_[h + 1] : out->spans.size();
    out->per_head[h] = {&out->spans[first_span_[h]],
                        static_cast<int>(end - first_span_[h])};
  }
  timings_.cache_ns += Lap(&t);
}

// Rows of head h's plan: arena rows (copy mode) or, per segment, segment
// rows (zero-copy), in sel_rows_[h] with runs in sel_runs_[h].
void ClusteredKvStore::GatherRows(int layer, int g, int h, int64_t step,
                                  BlockCache& cache) {
  const bool copy = cache_copies_rows_;
  const size_t n_segs = seg_view_.size();
  by_segment_.resize(n_segs);
  for (auto& b : by_segment_) b.clear();
  sel_rows_[h].clear();
  sel_pos_[h].clear();
  // Copy mode whose caches the device keeps (copy_on_device_): the rows
  // in place, in the copy-mode order (plan order, one run per stretch of
  // blocks of one segment).
  const bool plan_order = copy_on_device_;
  sel_runs_[h].clear();
  for (const BlockRef& b : plans_[h].blocks) {
    // Counted once per step however many of the group's heads take it.
    const int64_t offset =
        cache.Ensure(step, *seg_view_[b.segment], layer, g, b);
    if (plan_order) {
      const int64_t at = static_cast<int64_t>(sel_rows_[h].size());
      AppendBlockRows(*seg_view_[b.segment], layer, g, b.kind, b.id, b.begin,
                      b.count, config_.quest_page_size, &sel_rows_[h]);
      const int64_t n = static_cast<int64_t>(sel_rows_[h].size()) - at;
      if (!sel_runs_[h].empty() && sel_runs_[h].back().segment == b.segment) {
        sel_runs_[h].back().count += n;
      } else {
        sel_runs_[h].push_back({b.segment, at, n});
      }
    } else if (copy) {
      for (int32_t r = b.begin; r < b.begin + b.count; ++r) {
        sel_rows_[h].push_back(static_cast<int32_t>(offset + r));
        sel_pos_[h].push_back(cache.positions()[offset + r]);
      }
    } else {
      AppendBlockRows(*seg_view_[b.segment], layer, g, b.kind, b.id, b.begin,
                      b.count, config_.quest_page_size,
                      &by_segment_[b.segment]);
    }
  }
  if (plan_order) return;
  if (copy) {
    sel_runs_[h].push_back({-1, 0, static_cast<int64_t>(sel_rows_[h].size())});
    return;
  }
  for (size_t s = 0; s < n_segs; ++s) {
    if (by_segment_[s].empty()) continue;
    sel_runs_[h].push_back({static_cast<int32_t>(s),
                            static_cast<int64_t>(sel_rows_[h].size()),
                            static_cast<int64_t>(by_segment_[s].size())});
    if (sel_rows_[h].empty()) {  // the first run: take the rows, no copy
      sel_rows_[h].swap(by_segment_[s]);
    } else {
      sel_rows_[h].insert(sel_rows_[h].end(), by_segment_[s].begin(),
                          by_segment_[s].end());
    }
  }
}

// One index-list span per run of head `src`'s rows.
void ClusteredKvStore::AddSelectedSpans(int layer, int g, int src,
                                        const BlockCache& cache,
                                        std::vector<kernels::KvSpan>* spans) {
  for (const RowRun& run : sel_runs_[src]) {
    kernels::KvSpan sel;
    if (run.segment < 0) {  // the cache arena
      sel.k = cache.keys();
      sel.v = cache.values();
      sel.positions = sel_pos_[src].data() + run.offset;
    } else {
      const Segment& seg = *seg_view_[run.segment];
      const CacheRows* resident = resident_view_[run.segment];
      const int64_t head = int64_t{g} * seg.size() * shape_.head_dim;
      sel.k = resident ? resident->keys() + head : seg.keys(layer, g);
      sel.v = resident ? resident->values() + head : seg.values(layer, g);
      sel.first_pos = seg.first_pos();
      sel.row_positions = seg.row_positions(layer, g);
    }
    sel.dtype = config_.kv_dtype;
    sel.stride = shape_.head_dim;
    sel.count = run.count;
    sel.rows = sel_rows_[src].data() + run.offset;
    spans->push_back(sel);
  }
}

void ClusteredKvStore::RecordSelected(int layer, int src, int h) {
  const int g = h / shape_.group();
  auto& rec = recorded_[layer][h];
  rec.clear();
  for (const RowRun& run : sel_runs_[src]) {
    const Segment* seg = run.segment < 0 ? nullptr : seg_view_[run.segment];
    for (int64_t i = run.offset; i < run.offset + run.count; ++i) {
      const int32_t row = sel_rows_[src][i];
      rec.push_back(seg == nullptr
                        ? sel_pos_[src][i]
                        : seg->first_pos() + seg->SegmentRow(layer, g, row));
    }
  }
}

// ------------------------------------------------------------ bookkeeping

CacheStats ClusteredKvStore::cache_stats() const {
  CacheStats total;
  for (const auto& per_layer : caches_) {
    for (const auto& c : per_layer) total.Add(c.stats());
  }
  return total;
}

// Host tier: sinks, open rows and every referenced segment (K,V + index).
// Working set, as a GPU would hold it in device memory: every token of dense
// layers, sinks and tail of sparse layers, the selection index, and the cache
// arenas. On the CPU backend it is host memory (part of it also in host_bytes).
KvMemoryStats ClusteredKvStore::memory() const {
  KvMemoryStats m;
  const int64_t row_bytes = int64_t{2} * 2 * shape_.head_dim *
                            shape_.n_kv_heads;  // K+V, all KV heads
  const int64_t edge_rows = sink_count() + tail_tokens();
  m.host_bytes = row_bytes * edge_rows * shape_.n_layers;
  // Indexes are counted once the ClusterWorker has built them all (it
  // writes them concurrently until then).
  const bool indexed = IndexReady();
  for (const auto& s : segments_) {
    const int64_t b = s->kv_bytes() + (indexed ? s->index_bytes() : 0);
    m.host_bytes += b;
    if (s.use_count() > 1) m.host_shared_bytes += b;
  }
  for (int l = 0; l < shape_.n_layers; ++l) {
    if (!IsSparseLayer(l)) {
      m.working_set_bytes += row_bytes * n_tokens_;
      continue;
    }
    m.working_set_bytes += row_bytes * edge_rows;
    for (const auto& s : segments_) {
      if (!indexed) break;
      for (const auto& h : s->layer(l).heads) m.working_set_bytes += h.bytes();
    }
    for (const auto& c : caches_[l]) m.working_set_bytes += c.arena_bytes();
  }
  return m;
}

namespace {

// The request settings a fork may change: "policy, budget, ...".
std::string ForkChangeableSettings() {
  std::vector<std::string> names;
#define CKV_NUMBER(name, type, range, fork, help) \
  if (fork == settings::Fork::kMayChange) names.push_back(#name);
#define CKV_NAMED(name, fork, help) names.push_back(#name);
  CKV_KV_WIRE_NAMES(CKV_NAMED)
  CKV_KV_WIRE_NUMBERS(CKV_NUMBER)
#undef CKV_NAMED
#undef CKV_NUMBER
  return absl::StrJoin(names, ", ");
}

// The settings that shape the stored segments (settings::Fork::kLayout)
// must match between parent and fork.
absl::Status CheckForkConfig(const KvStoreConfig& p, const KvStoreConfig& c) {
  std::string changed;
#define CKV_LAYOUT(name, fork) \
  if (fork == settings::Fork::kLayout && p.name != c.name) changed = #name;
#define CKV_NUMBER(name, type, range, fork, help) CKV_LAYOUT(name, fork)
#define CKV_NAMED(name, fork, help) CKV_LAYOUT(name, fork)
  CKV_KV_WIRE_NUMBERS(CKV_NUMBER)
  CKV_KV_ENGINE_NUMBERS(CKV_NUMBER)
  CKV_KV_ENGINE_NAMES(CKV_NAMED)
#undef CKV_NAMED
#undef CKV_NUMBER
#undef CKV_LAYOUT
  if (!changed.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fork may not change ", changed,
                     " (it shapes the parent's segments): a fork may change "
                     "only ",
                     ForkChangeableSettings()));
  }
  const PolicyInfo* child = FindPolicy(c.policy);
  if (child != nullptr && (child->indexes & ~BuiltIndexes(p)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the parent's segments have no index for policy ", child->name));
  }
  return ValidateKvStoreConfig(c);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusteredKvStore>> ClusteredKvStore::Fork(
    const KvStoreConfig& child_config) const {
  if (reserved_ != 0) {
    return absl::FailedPreconditionError("cannot fork during a call");
  }
  if (auto s = CheckForkConfig(config_, child_config); !s.ok()) return s;
  KvStoreConfig c = child_config;
  c.build_all_indexes = config_.build_all_indexes;
  auto child = std::make_unique<ClusteredKvStore>(shape_, c, worker_, env_);
  child->n_tokens_ = n_tokens_;
  child->sinks_ = sinks_;
  // Only the used open rows: a parent that prefilled a long prompt keeps a
  // large, empty open buffer that the child need not copy.
  const int hd = shape_.head_dim;
  for (int l = 0; l < shape_.n_layers; ++l) {
    RowBuffer& dst = child->open_[l];
    dst.capacity = open_rows_[l];
    const size_t n = size_t{1} * shape_.n_kv_heads * dst.capacity * hd;
    dst.k.resize(n);
    dst.v.resize(n);
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      const size_t from = size_t{1} * h * open_[l].capacity * hd;
      const size_t to = size_t{1} * h * dst.capacity * hd;
      std::copy_n(open_[l].k.data() + from, open_rows_[l] * hd,
                  dst.k.data() + to);
      std::copy_n(open_[l].v.data() + from, open_rows_[l] * hd,
                  dst.v.data() + to);
    }
  }
  child->sink_rows_ = sink_rows_;
  child->open_rows_ = open_rows_;
  child->open_first_pos_ = open_first_pos_;
  child->segments_ = segments_;
  return child;
}

absl::StatusOr<std::unique_ptr<ClusteredKvStore>> ClusteredKvStore::ForkPrefix(
    size_t n_segments) const {
  if (reserved_ != 0) {
    return absl::FailedPreconditionError("cannot fork during a call");
  }
  if (n_segments < 1 || n_segments > segments_.size() ||
      sink_count() != config_.sink_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForkPrefix: ", n_segments, " of ", segments_.size(),
                     " segments, ", sink_count(), " sink rows"));
  }
  auto child =
      std::make_unique<ClusteredKvStore>(shape_, config_, worker_, env_);
  const Segment& last = *segments_[n_segments - 1];
  child->n_tokens_ = last.first_pos() + last.size();
  child->sinks_ = sinks_;
  child->sink_rows_ = sink_rows_;
  child->open_first_pos_ = child->n_tokens_;
  child->segments_.assign(segments_.begin(), segments_.begin() + n_segments);
  return child;
}

}  // namespace ckv
