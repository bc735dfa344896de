#include "model/backend/device/device_planner.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/device/op_launchers.h"
#include "kernels/device/phases.h"
#include "kernels/device/selection_phases.h"
#include "model/backend/device/device_planner_layout.h"

namespace ckv {

namespace dev = kernels::device;

DevicePlanner::DevicePlanner(dev::Runtime& runtime,
                             std::shared_ptr<void> keep_alive,
                             int64_t table_bytes, DevicePlannerDebug debug)
    : rt_(runtime),
      keep_alive_(std::move(keep_alive)),
      debug_(debug),
      call_(std::make_unique<Call>()) {
  auto st = rt_.CreateStream(dev::kHighestPriority);
  if (Ok(st.status())) stream_ = *st;
  auto ev = rt_.CreateEvent();
  if (Ok(ev.status())) lists_ready_ = *ev;
  tables_ = std::make_unique<SegmentTables>(rt_, stream_, table_bytes);
}

DevicePlanner::~DevicePlanner() {
  tables_.reset();
  host_chunks_.ReleaseAll(rt_);
  device_chunks_.ReleaseAll(rt_);
}

void DevicePlanner::EnableRowLists(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  row_lists_ = on;
}

bool DevicePlanner::BuildsRowLists() const {
  std::lock_guard<std::mutex> lock(mu_);
  return row_lists_;
}

bool DevicePlanner::lists_launched() const {
  std::lock_guard<std::mutex> lock(mu_);
  return call_->launched && call_->lists;
}

int64_t DevicePlanner::deferred_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deferred_calls_;
}

int64_t DevicePlanner::list_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_ops_;
}

bool DevicePlanner::Plans(const KvStoreConfig& config) const {
  return config.policy == KvPolicy::kClusterKv ||
         config.policy == KvPolicy::kQuest;
}

absl::Status DevicePlanner::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

int64_t DevicePlanner::layers_planned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layers_planned_;
}

int64_t DevicePlanner::table_fallbacks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_fallbacks_;
}

int64_t DevicePlanner::table_uploads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tables_->uploads();
}

int64_t DevicePlanner::table_evictions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tables_->evictions();
}

int64_t DevicePlanner::batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batches_;
}

DevicePlanner::OpCounts DevicePlanner::op_counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

bool DevicePlanner::Ok(const absl::Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
  return s.ok();
}

bool DevicePlanner::PlanLayer(const KvStoreConfig& config, const KvShape& shape,
                              const std::vector<const Segment*>& segments,
                              int layer, const float* q, HeadPlan* plans) {
  std::lock_guard<std::mutex> lock(mu_);
  bool planned = false;
  LaunchCall({Request{&config, &shape, &segments, layer, q, 0, plans, &planned,
                      nullptr}},
             nullptr);
  FinishCall();
  return planned;
}

void DevicePlanner::Queue(const KvStoreConfig& config, const KvShape& shape,
                          const std::vector<const Segment*>& segments,
                          int layer, const float* q, HeadPlan* plans,
                          bool* planned, DeviceRowLists* lists) {
  std::lock_guard<std::mutex> lock(mu_);
  *planned = false;
  if (lists != nullptr) lists->valid = false;
  if (!row_lists_) lists = nullptr;
  // A query in the backend's q rows: read where they are on the device.
  const char* at = reinterpret_cast<const char*>(q);
  uint64_t device_q = 0;
  if (query_host_ != nullptr && at >= query_host_ &&
      at < query_host_ + query_bytes_) {
    device_q = query_device_ + static_cast<uint64_t>(at - query_host_);
  }
  queued_.push_back(
      {&config, &shape, &segments, layer, q, device_q, plans, planned, lists});
}

void DevicePlanner::SetQueryRows(const float* host, uint64_t device,
                                 int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  query_host_ = reinterpret_cast<const char*>(host);
  query_device_ = device;
  query_bytes_ = host != nullptr ? bytes : 0;
}

void DevicePlanner::RunQueued() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_.empty()) return;
  LaunchCall(std::exchange(queued_, {}), nullptr);
  FinishCall();
}

void DevicePlanner::LaunchQueued(const dev::Event& queries_ready) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_.empty()) return;
  LaunchCall(std::exchange(queued_, {}), &queries_ready);
}

void DevicePlanner::FinishQueued() {
  std::lock_guard<std::mutex> lock(mu_);
  FinishCall();
}

void DevicePlanner::LaunchCall(std::vector<Request> requests,
                               const dev::Event* queries_ready) {
  Call& c = *call_;
  c = Call{};
  c.requests = std::move(requests);
  for (Request& r : c.requests) {
    *r.planned = false;
    if (queries_ready == nullptr) r.device_q = 0;  // the host's q, then
  }
  if (!status_.ok()) return;
  const int64_t tick = ++calls_;  // the call's tables are never evicted
  const size_t n = c.requests.size();
  c.layouts.resize(n);
  c.planned.assign(n, false);
  int64_t in = 0, work = 0, out = 0;
  for (size_t i = 0; i < n; ++i) {
    c.planned[i] =
        !c.requests[i].segments->empty() &&
        MakeLayout(c.requests[i], tick, &in, &work, &out, &c.layouts[i]);
  }
  if (!Ok(tables_->status()) || in == 0) return;
  Batch batch;
  LayOutBatch(c.requests, c.layouts, &c.planned, &in, &work, out, &batch);
  if (!Reserve(in, work, out) || !Ok(rt_.HostWrite(c.in_host, in))) {
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (c.planned[i]) Fill(c.layouts[i], c.requests[i]);
  }
  FillBatch(c.requests, c.layouts, c.planned, &batch);
  if (!Ok(rt_.CopyH2D(c.in_dev, c.in_host, in, stream_)) ||
      !LaunchBatch(batch, in, work, out, queries_ready)) {
    return;
  }
  c.out = out;
  c.launched = true;
  // The row-list items are in request, KV head, query order (FillBatch).
  const dev::threads::RowListItem* item = batch.row_items.data();
  for (size_t i = 0; i < n; ++i) {
    if (!c.planned[i] || !c.layouts[i].lists) continue;
    FillLists(c.layouts[i], item, c.requests[i].lists);
    if (c.layouts[i].cache) {
      FillCacheLists(c.layouts[i], c.requests[i].lists);
    }
    item += int64_t{c.layouts[i].n_kv} * c.layouts[i].nq;
  }
}

void DevicePlanner::FinishCall() {
  Call& c = *call_;
  if (c.launched && Ok(rt_.Synchronize(stream_))) ReadCall(c);
  c = Call{};
  // Without row lists or deferred calls nothing reads the step's buffers
  // after the synchronisation: reused from the next call.
  if (deferred_.empty() && !step_has_lists_) {
    host_chunks_.Reset(rt_);
    device_chunks_.Reset(rt_);
  }
}

// The blocks of KV head g over the request's segments (clusters, or
// quest's pages: false when a segment has no page bounds resident).
bool DevicePlanner::CountBlocks(const Request& r, const Layout& l, int g,
                                int64_t* total) {
  *total = 0;
  for (int s = 0; s < l.n_segs; ++s) {
    const HeadIndex& x = (*r.segments)[s]->layer(r.layer).heads[g];
    if (!l.quest) {
      *total += x.k;
      continue;
    }
    const SegmentTables::Head& e = l.entries[s]->heads[g];
    if (e.page_min < 0 ||
        e.pages * l.hd != static_cast<int64_t>(x.page_min.size())) {
      return false;
    }
    *total += e.pages;
  }
  return true;
}

bool DevicePlanner::MakeLayout(const Request& r, int64_t tick, int64_t* in_off,
                               int64_t* work_off, int64_t* out_off,
                               Layout* out) {
  const std::vector<const Segment*>& segments = *r.segments;
  Layout& l = *out;
  for (const Segment* s : segments) {
    const SegmentTables::Entry* e = tables_->Ensure(*s, r.layer, tick);
    if (e == nullptr) {
      if (tables_->status().ok()) ++table_fallbacks_;
      return false;
    }
    l.entries.push_back(e);
  }
  const KvStoreConfig& config = *r.config;
  l.n_kv = r.shape->n_kv_heads;
  l.group = r.shape->group();
  l.hd = r.shape->head_dim;
  l.n_segs = static_cast<int>(segments.size());
  l.shared = config.gqa_selection == GqaSelection::kPerKvHead;
  l.quest = config.policy == KvPolicy::kQuest;
  l.nq = l.shared ? 1 : l.group;
  l.qn = l.quest ? l.group : l.nq;
  l.lists = r.lists != nullptr;
  l.cache = l.lists && !r.lists->caches.empty();
  int64_t rows = 0;
  for (const Segment* s : segments) rows += s->size();
  // The most tokens a plan takes: the budget, or quest's whole pages.
  const int64_t ps = std::max(1, config.quest_page_size);
  const int64_t most =
      l.quest ? (int64_t{config.budget} + ps - 1) / ps * ps : config.budget;
  l.cap = std::max<int64_t>(1, std::min<int64_t>(most, rows));
  int64_t in = 0, work = 0, results = 0;
  l.q = in;
  in += Section<float>(int64_t{l.n_kv} * l.qn * l.hd);
  for (int g = 0; g < l.n_kv; ++g) {
    Layout::Head h;
    if (!CountBlocks(r, l, g, &h.total)) return false;
    h.seg_first = in;
    in += Section<int64_t>(l.n_segs + 1);
    h.seg_size = in;
    in += Section<int64_t>(l.n_segs);
    if (!l.quest) {  // quest's page blocks have no member tables
      h.member_first = in;
      in += Section<int64_t>(h.total + 1);
      h.member_last = in;
      in += Section<int64_t>(std::max<int64_t>(h.total, 1));
    }
    h.scores = work;
    work += Section<float>(l.nq * h.total);
    // A scratch per planned query: the batch runs them all in one op.
    h.scratch_stride = AlignUp(
        std::max<int64_t>(dev::SelectScratchBytes(h.total, l.n_segs), 1));
    h.scratch = work;
    work += h.scratch_stride * l.nq;
    h.max_out = dev::MaxPlannedBlocks(h.total, l.n_segs,
                                      l.quest ? 0 : config.recent_tokens,
                                      config.quest_page_size);
    h.stride =
        Section<dev::PlanTotals>(1) + Section<dev::PlannedBlock>(h.max_out);
    h.results = results;
    results += h.stride * l.nq;
    if (l.lists) {
      h.seg_pos = in;
      in += Section<int64_t>(l.n_segs);
      h.seg_sorted = in;
      in += Section<int32_t>(l.n_segs);
      h.seg_row_of = in;
      in += Section<int64_t>(l.n_segs);
      h.list_seg_first = in;
      if (l.quest) in += Section<int64_t>(l.n_segs + 1);
      h.list_stride = AlignUp(ListLayout(l.cap, l.n_segs, h.max_out).bytes);
      h.lists = work;
      work += h.list_stride * l.nq;
    }
    l.heads.push_back(h);
  }
  if (l.cache && !MakeCacheLayout(r, &l, &in, &work, &results)) return false;
  l.out_bytes = results;
  l.in_bytes = in;
  l.work_bytes = work;
  l.in_off = *in_off;
  l.work_off = *work_off;
  l.out_off = *out_off;
  *in_off += AlignUp(l.in_bytes);
  *work_off += AlignUp(l.work_bytes);
  *out_off += AlignUp(l.out_bytes);
  return true;
}

// The request's planned queries as the gather reads them from `src` (the
// query rows) into its upload's query section.
dev::QueryItem DevicePlanner::QueryItemOf(const Layout& l, uint64_t src) {
  dev::QueryItem it;
  it.src = src;
  it.dst_offset = (l.in_off + l.q) / 4;
  it.n_kv = l.n_kv;
  it.group = l.group;
  it.hd = l.hd;
  it.shared = l.qn == 1 && l.group > 1 ? 1 : 0;  // the group's sum
  return it;
}

// The batch's score items (one per request, KV head and segment with
// clusters; element offsets into the upload, the table pool and the work
// buffer), their thread prefix, and room for the select items (one per
// planned query, written by FillBatch once the buffers' addresses are
// known); the results region after every request's work.
void DevicePlanner::LayOutBatch(const std::vector<Request>& requests,
                                const std::vector<Layout>& layouts,
                                std::vector<bool>* planned, int64_t* in,
                                int64_t* work, int64_t out, Batch* b) {
  int64_t n_select = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!(*planned)[i]) continue;
    const Layout& l = layouts[i];
    // One head_dim per batch (one model's layer): another falls back.
    if (b->dim == 0) b->dim = l.hd;
    if (l.hd != b->dim) {
      (*planned)[i] = false;
      ++table_fallbacks_;
      continue;
    }
    for (int g = 0; g < l.n_kv; ++g) {
      b->max_n = std::max(b->max_n, l.heads[g].total);
      n_select += l.nq;
      AddScoreItems(requests[i], l, g, b);
    }
  }
  const int64_t n_score = static_cast<int64_t>(b->score_items.size());
  b->score_items_off = *in;
  *in += Section<dev::ScoreItem>(std::max<int64_t>(n_score, 1));
  b->thread_base_off = *in;
  *in += Section<int64_t>(n_score + 1);
  b->select_items_off = *in;
  *in += Section<dev::threads::SelectItem>(std::max<int64_t>(n_select, 1));
  int64_t n_query = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    n_query += (*planned)[i] && requests[i].device_q != 0;
  }
  b->query_items_off = *in;
  *in += Section<dev::QueryItem>(std::max<int64_t>(n_query, 1));
  int64_t n_lists = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if ((*planned)[i] && layouts[i].lists) {
      n_lists += int64_t{layouts[i].n_kv} * layouts[i].nq;
    }
  }
  b->row_items_off = *in;
  *in += Section<dev::threads::RowListItem>(std::max<int64_t>(n_lists, 1));
  b->row_items.reserve(static_cast<size_t>(n_lists));
  int64_t n_cache = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if ((*planned)[i] && layouts[i].cache) n_cache += layouts[i].n_kv;
  }
  b->cache_items_off = *in;
  *in += Section<dev::CacheItem>(std::max<int64_t>(n_cache, 1));
  b->select_items.reserve(static_cast<size_t>(n_select));
  b->results = *work;
  *work += AlignUp(std::max<int64_t>(out, 1));
}

// KV head g's score items: per segment with blocks, its clusters for
// every planned query (one item), or quest's pages per plan (an item per
// query head, or one summing the group's page scores with per_kv_head).
void DevicePlanner::AddScoreItems(const Request& r, const Layout& l, int g,
                                  Batch* b) {
  const Layout::Head& h = l.heads[g];
  const int64_t q0 = (l.in_off + l.q) / 4 + int64_t{g} * l.qn * l.hd;
  int64_t first = 0;
  for (int s = 0; s < l.n_segs; ++s) {
    const SegmentTables::Head& e = l.entries[s]->heads[g];
    const int64_t n =
        l.quest ? e.pages : (*r.segments)[s]->layer(r.layer).heads[g].k;
    for (int j = 0; j < (l.quest ? l.nq : 1) && n > 0; ++j) {
      dev::ScoreItem it;
      it.n = static_cast<int32_t>(n);
      it.ld = static_cast<int32_t>(h.total);
      it.score_offset = (l.work_off + h.scores) / 4 + j * h.total + first;
      if (l.quest) {
        it.kind = dev::threads::kScoreQuestPages;
        it.q_offset = q0 + int64_t{j} * l.hd;
        it.n_q = l.shared ? l.group : 1;
        it.panel_offset = e.page_min / 2;
      } else {
        it.q_offset = q0;
        it.n_q = l.nq;
        it.panel_offset = e.panels / 2;
      }
      b->score_items.push_back(it);
      b->thread_base.push_back(b->thread_base.back() +
                               dev::threads::ScoreItemThreads(it));
    }
    first += n;
  }
}

// The select items (device addresses of each planned query's scores,
// block table, scratch and results) and both batch tables into the upload.
void DevicePlanner::FillBatch(const std::vector<Request>& requests,
                              const std::vector<Layout>& layouts,
                              const std::vector<bool>& planned, Batch* b) {
  const DevPtr pool = tables_->pool();
  const Call& c = *call_;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!planned[i]) continue;
    const Layout& l = layouts[i];
    const KvStoreConfig& config = *requests[i].config;
    const DevPtr in = c.in_dev + l.in_off, work = c.work_dev + l.work_off;
    const DevPtr results = c.work_dev + b->results + l.out_off;
    if (requests[i].device_q != 0) {
      b->query_items.push_back(QueryItemOf(l, requests[i].device_q));
    }
    for (int g = 0; g < l.n_kv; ++g) {
      const Layout::Head& h = l.heads[g];
      for (int j = 0; j < l.nq; ++j) {
        dev::SelectArgs a;
        a.scores = work + h.scores + int64_t{j} * h.total * 4;
        a.n = h.total;
        a.seg_first = in + h.seg_first;
        a.seg_size = in + h.seg_size;
        a.n_segs = l.n_segs;
        if (!l.quest) {
          a.member_first = in + h.member_first;
          a.member_last = in + h.member_last;
        }
        a.members = pool;  // (quest: for the row lists' row_of)
        a.n_members = tables_->pool_bytes() / 4;
        a.budget = config.budget - (debug_.budget_one_short ? 1 : 0);
        a.recent_tokens = l.quest ? 0 : config.recent_tokens;
        a.page_size = config.quest_page_size;
        a.mode = l.quest ? dev::threads::kSelectTopPages
                         : dev::threads::kSelectFillBudget;
        a.scratch = work + h.scratch + j * h.scratch_stride;
        a.totals = results + h.results + j * h.stride;
        a.out = a.totals + Section<dev::PlanTotals>(1);
        a.max_out = h.max_out;
        b->select_items.push_back(dev::ItemOf(a));
        if (l.lists) b->row_items.push_back(RowItemOf(l, g, j, a, in, work));
      }
      if (l.cache) AddCacheItem(l, requests[i], g, b);
    }
  }
  for (const dev::threads::RowListItem& it : b->row_items) {
    b->max_slots = std::max(b->max_slots, it.max_out);
  }
  PutTable(b->score_items, b->score_items_off);
  PutTable(b->thread_base, b->thread_base_off);
  PutTable(b->select_items, b->select_items_off);
  PutTable(b->query_items, b->query_items_off);
  PutTable(b->row_items, b->row_items_off);
  PutTable(b->cache_items, b->cache_items_off);
}

// Copies a batch table into the upload at `off` (an empty one: nothing;
// memcpy from its null data would be undefined).
template <class T>
void DevicePlanner::PutTable(const std::vector<T>& table, int64_t off) {
  if (table.empty()) return;
  std::memcpy(call_->in_host + off, table.data(), table.size() * sizeof(T));
}

// The call's buffers, taken for the step (nothing of an earlier call of
// the step is overwritten: its row lists may still be read).
bool DevicePlanner::Reserve(int64_t in, int64_t work, int64_t out) {
  Call& c = *call_;
  auto in_host = host_chunks_.Take(rt_, in);
  if (!Ok(in_host.status())) return false;
  auto out_host = host_chunks_.Take(rt_, out);
  if (!Ok(out_host.status())) return false;
  auto in_dev = device_chunks_.Take(rt_, in);
  if (!Ok(in_dev.status())) return false;
  auto work_dev = device_chunks_.Take(rt_, work);
  if (!Ok(work_dev.status())) return false;
  c.in_host = in_host->host;
  c.out_host = out_host->host;
  c.in_dev = in_dev->ptr;
  c.work_dev = work_dev->ptr;
  return true;
}

// The upload: every planned query (per_kv_head: the group's queries summed
// in order, as the policy's Plan sums them; a group of one as it is), and
// per KV head the block table, segment-major (cluster c of segment s is
// block seg_first[s] + c; its members are pool elements [member_first,
// member_last) of the segment's resident entry).
void DevicePlanner::Fill(const Layout& l, const Request& r) {
  const std::vector<const Segment*>& segments = *r.segments;
  const int layer = r.layer;
  const float* q = r.q;
  char* base = call_->in_host + l.in_off;
  // The host's queries, gathered by the device's own thread body (with
  // device_q the gather op writes them on the device instead).
  if (r.device_q == 0) {
    const dev::QueryItem it = QueryItemOf(l, 0);
    float* qs = reinterpret_cast<float*>(base + l.q);
    for (int64_t g = 0; g < l.n_kv; ++g) {
      for (int64_t d = 0; d < l.hd; ++d) {
        dev::threads::GatherQuery(it, q, qs, g, d);
      }
    }
  }
  for (int g = 0; g < l.n_kv; ++g) {
    const Layout::Head& h = l.heads[g];
    auto* seg_first = reinterpret_cast<int64_t*>(base + h.seg_first);
    auto* seg_size = reinterpret_cast<int64_t*>(base + h.seg_size);
    auto* first = reinterpret_cast<int64_t*>(base + h.member_first);
    auto* last = reinterpret_cast<int64_t*>(base + h.member_last);
    int64_t block = 0;
    seg_first[0] = 0;
    for (int s = 0; s < l.n_segs; ++s) {
      const HeadIndex& x = segments[s]->layer(layer).heads[g];
      const int64_t members = l.entries[s]->heads[g].members / 4;
      seg_size[s] = segments[s]->size();
      if (l.quest) {  // pages: no member tables
        block += l.entries[s]->heads[g].pages;
        seg_first[s + 1] = block;
        continue;
      }
      for (int c = 0; c < x.k; ++c) {
        first[block + c] = members + x.offsets[c];
        last[block + c] = members + x.offsets[c + 1];
      }
      block += x.k;
      seg_first[s + 1] = block;
    }
    if (!l.quest) first[block] = 0;  // declared, unread with member_last
  }
  if (l.lists) FillListTables(l, r);
  if (l.cache) FillCacheTables(l, r);
}

// At most three ops for the whole call (every request, KV head, segment
// and planned query): the queries read on the device (after the backend's
// queries_ready), the scores, then the selections; then one D2H of the
// results.
bool DevicePlanner::LaunchBatch(const Batch& b, int64_t in, int64_t work,
                                int64_t out, const dev::Event* queries_ready) {
  const dev::OpLaunchers* k = rt_.launchers();
  // Launches `op` (its kernels through `on_device` on a GPU) and counts it
  // and its items.
  auto launch = [&](dev::Op op, auto on_device, int64_t n_items, int64_t* ops,
                    int64_t* items) {
    if (k != nullptr) op.device_launch = on_device;
    if (!Ok(rt_.Launch(std::move(op), stream_))) return false;
    ++*ops;
    *items += n_items;
    return true;
  };
  if (!b.query_items.empty()) {
    // The queries are the backend's: computed on its stream.
    if (!debug_.skip_query_wait && !Ok(rt_.Wait(stream_, *queries_ready))) {
      return false;
    }
    dev::GatherQueriesArgs a;
    a.items = call_->in_dev + b.query_items_off;
    a.n_items = static_cast<int32_t>(b.query_items.size());
    a.pool = call_->in_dev;
    a.pool_elems = in / 4;
    if (!launch(
            dev::GatherQueriesOp(a, b.query_items),
            [k, a](void* st) { return k->GatherQueries(a, st); }, a.n_items,
            &ops_.gather_ops, &ops_.gather_items)) {
      return false;
    }
  }
  if (!b.score_items.empty()) {
    dev::ScoreBatchArgs a;
    a.items = call_->in_dev + b.score_items_off;
    a.thread_base = call_->in_dev + b.thread_base_off;
    a.n_items = static_cast<int32_t>(b.score_items.size());
    a.dim = b.dim;
    a.q_pool = call_->in_dev;
    a.q_elems = in / 4;
    a.panel_pool = tables_->pool();
    a.panel_elems = tables_->pool_bytes() / 2;
    a.score_pool = call_->work_dev;
    a.score_elems = work / 4;
    a.total_threads = b.thread_base.back();
    if (!launch(
            dev::ScoreClustersBatchOp(a),
            [k, a](void* st) { return k->ScoreClustersBatch(a, st); },
            a.n_items, &ops_.score_ops, &ops_.score_items)) {
      return false;
    }
  }
  dev::SelectBatchArgs a;
  a.items = call_->in_dev + b.select_items_off;
  a.n_items = static_cast<int32_t>(b.select_items.size());
  a.max_n = b.max_n;
  if (!launch(
          dev::SelectBlocksBatchOp(a, b.select_items),
          [k, a](void* st) { return k->SelectBlocksBatch(a, st); }, a.n_items,
          &ops_.select_ops, &ops_.select_items)) {
    return false;
  }
  if (!b.row_items.empty()) {
    dev::RowListsBatchArgs r;
    r.items = call_->in_dev + b.row_items_off;
    r.n_items = static_cast<int32_t>(b.row_items.size());
    r.max_slots = b.max_slots;
    int64_t items = 0;
    if (!launch(
            dev::RowListsBatchOp(r, b.row_items),
            [k, r](void* st) { return k->RowListsBatch(r, st); }, r.n_items,
            &list_ops_, &items)) {
      return false;
    }
    call_->lists = true;
    step_has_lists_ = true;
  }
  if (!b.cache_items.empty() && !LaunchCacheLists(b)) return false;
  // The attention over the row lists waits for this event (after the
  // plans' copy too: ReadDeferred's synchronisation then finds it done).
  return Ok(rt_.CopyD2H(call_->out_host, call_->work_dev + b.results, out,
                        stream_)) &&
         Ok(rt_.Record(lists_ready_, stream_));
}

}  // namespace ckv
