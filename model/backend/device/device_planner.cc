#include "model/backend/device/device_planner.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/device/op_launchers.h"
#include "kernels/device/phases.h"
#include "kernels/device/selection_phases.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

constexpr int64_t kAlign = 64;

int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes of `n` elements of T, aligned.
template <class T>
int64_t Section(int64_t n) {
  return AlignUp(n * static_cast<int64_t>(sizeof(T)));
}

}  // namespace

// Where everything of one request lies: the upload (queries, then per KV
// head the block table: segment starts and sizes, each block's first and
// last member in the table pool), the device work buffer (scores and a
// select_blocks scratch per planned query) and the results the host reads
// back (per planned query its PlanTotals followed by its blocks, in the
// call's results region).
struct DevicePlanner::Layout {
  struct Head {
    int64_t total = 0;  // clusters over all segments
    int64_t seg_first = 0, seg_size = 0, member_first = 0,
            member_last = 0;  // in_dev offsets
    int64_t scores = 0;       // work offset: float [nq][total]
    int64_t scratch = 0;      // work offset of query 0's scratch
    int64_t scratch_stride = 0;
    int64_t max_out = 0;
    int64_t results = 0;  // results offset of query 0's result
    int64_t stride = 0;   // bytes per query's result
  };
  int n_kv = 0, group = 0, nq = 0, hd = 0, n_segs = 0;
  bool shared = false;
  int64_t q = 0;  // in_dev offset: float [n_kv][nq][hd]
  std::vector<Head> heads;
  int64_t in_bytes = 0, work_bytes = 0, out_bytes = 0;
  // Where this request's sections start in the call's buffers (the
  // offsets above are from these; out_off into the results region).
  int64_t in_off = 0, work_off = 0, out_off = 0;
  std::vector<const SegmentTables::Entry*> entries;  // per segment
};

// The call's batch tables (after every request's upload): the score items
// with their thread prefix and the select items; and the results region
// in the work buffer (every request's results, one D2H).
struct DevicePlanner::Batch {
  std::vector<dev::ScoreItem> score_items;
  std::vector<int64_t> thread_base = {0};
  std::vector<dev::threads::SelectItem> select_items;
  std::vector<dev::QueryItem> query_items;  // queries read on the device
  int dim = 0;  // every request's head_dim
  int64_t max_n = 0;
  int64_t score_items_off = 0, thread_base_off = 0, select_items_off = 0,
          query_items_off = 0;
  int64_t results = 0;  // work offset
};

// A launched call: its requests and layouts until FinishCall reads the
// plans (out: the results' bytes).
struct DevicePlanner::Call {
  std::vector<Request> requests;
  std::vector<Layout> layouts;
  std::vector<bool> planned;
  int64_t out = 0;
  bool launched = false;
};

DevicePlanner::DevicePlanner(dev::Runtime& runtime,
                             std::shared_ptr<void> keep_alive,
                             int64_t table_bytes, DevicePlannerDebug debug)
    : rt_(runtime),
      keep_alive_(std::move(keep_alive)),
      debug_(debug),
      call_(std::make_unique<Call>()) {
  auto st = rt_.CreateStream(dev::kHighestPriority);
  if (Ok(st.status())) stream_ = *st;
  tables_ = std::make_unique<SegmentTables>(rt_, stream_, table_bytes);
}

DevicePlanner::~DevicePlanner() {
  tables_.reset();
  Release(rt_, &in_host_);
  Release(rt_, &out_host_);
  Release(rt_, &in_dev_);
  Release(rt_, &work_dev_);
}

bool DevicePlanner::Plans(const KvStoreConfig& config) const {
  return config.policy == KvPolicy::kClusterKv;
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
  LaunchCall(
      {Request{&config, &shape, &segments, layer, q, 0, plans, &planned}},
      nullptr);
  FinishCall();
  return planned;
}

void DevicePlanner::Queue(const KvStoreConfig& config, const KvShape& shape,
                          const std::vector<const Segment*>& segments,
                          int layer, const float* q, HeadPlan* plans,
                          bool* planned) {
  std::lock_guard<std::mutex> lock(mu_);
  *planned = false;
  // A query in the backend's q rows: read where they are on the device.
  const char* at = reinterpret_cast<const char*>(q);
  uint64_t device_q = 0;
  if (query_host_ != nullptr && at >= query_host_ &&
      at < query_host_ + query_bytes_) {
    device_q = query_device_ + static_cast<uint64_t>(at - query_host_);
  }
  queued_.push_back(
      {&config, &shape, &segments, layer, q, device_q, plans, planned});
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
  if (!Reserve(in, work, out) || !Ok(rt_.HostWrite(in_host_.host, in))) {
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (c.planned[i]) Fill(c.layouts[i], c.requests[i]);
  }
  FillBatch(c.requests, c.layouts, c.planned, &batch);
  if (!Ok(rt_.CopyH2D(in_dev_.ptr, in_host_.host, in, stream_)) ||
      !LaunchBatch(batch, in, work, out, queries_ready)) {
    return;
  }
  c.out = out;
  c.launched = true;
}

void DevicePlanner::FinishCall() {
  Call& c = *call_;
  if (c.launched && Ok(rt_.Synchronize(stream_)) &&
      Ok(rt_.HostRead(out_host_.host, c.out))) {
    for (size_t i = 0; i < c.requests.size(); ++i) {
      if (!c.planned[i]) continue;
      ReadPlans(c.layouts[i], c.requests[i].plans);
      *c.requests[i].planned = true;
      ++layers_planned_;
    }
    ++batches_;
  }
  c = Call{};
}

bool DevicePlanner::MakeLayout(const Request& r, int64_t tick, int64_t* in_off,
                               int64_t* work_off, int64_t* out_off,
                               Layout* out) {
  const std::vector<const Segment*>& segments = *r.segments;
  const int layer = r.layer;
  Layout& l = *out;
  for (const Segment* s : segments) {
    const SegmentTables::Entry* e = tables_->Ensure(*s, layer, tick);
    if (e == nullptr) {
      if (tables_->status().ok()) ++table_fallbacks_;
      return false;
    }
    l.entries.push_back(e);
  }
  l.n_kv = r.shape->n_kv_heads;
  l.group = r.shape->group();
  l.hd = r.shape->head_dim;
  l.n_segs = static_cast<int>(segments.size());
  l.shared = r.config->gqa_selection == GqaSelection::kPerKvHead;
  l.nq = l.shared ? 1 : l.group;
  int64_t in = 0, work = 0, results = 0;
  l.q = in;
  in += Section<float>(int64_t{l.n_kv} * l.nq * l.hd);
  for (int g = 0; g < l.n_kv; ++g) {
    Layout::Head h;
    for (const Segment* s : segments) h.total += s->layer(layer).heads[g].k;
    h.seg_first = in;
    in += Section<int64_t>(l.n_segs + 1);
    h.seg_size = in;
    in += Section<int64_t>(l.n_segs);
    h.member_first = in;
    in += Section<int64_t>(h.total + 1);
    h.member_last = in;
    in += Section<int64_t>(std::max<int64_t>(h.total, 1));
    h.scores = work;
    work += Section<float>(l.nq * h.total);
    // A scratch per planned query: the batch runs them all in one op.
    h.scratch_stride = AlignUp(
        std::max<int64_t>(dev::SelectScratchBytes(h.total, l.n_segs), 1));
    h.scratch = work;
    work += h.scratch_stride * l.nq;
    h.max_out = dev::MaxPlannedBlocks(
        h.total, l.n_segs, r.config->recent_tokens, r.config->quest_page_size);
    h.stride =
        Section<dev::PlanTotals>(1) + Section<dev::PlannedBlock>(h.max_out);
    h.results = results;
    results += h.stride * l.nq;
    l.heads.push_back(h);
  }
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
  it.shared = l.shared ? 1 : 0;
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
    const int layer = requests[i].layer;
    const std::vector<const Segment*>& segments = *requests[i].segments;
    for (int g = 0; g < l.n_kv; ++g) {
      const Layout::Head& h = l.heads[g];
      b->max_n = std::max(b->max_n, h.total);
      n_select += l.nq;
      int64_t first = 0;
      for (int s = 0; s < l.n_segs; ++s) {
        const int k = segments[s]->layer(layer).heads[g].k;
        if (k > 0) {
          dev::ScoreItem it;
          it.q_offset = (l.in_off + l.q + int64_t{g} * l.nq * l.hd * 4) / 4;
          it.panel_offset = l.entries[s]->heads[g].panels / 2;
          it.score_offset = (l.work_off + h.scores + first * 4) / 4;
          it.n_q = l.nq;
          it.n = k;
          it.ld = static_cast<int32_t>(h.total);
          b->score_items.push_back(it);
          b->thread_base.push_back(b->thread_base.back() + int64_t{l.nq} * k);
        }
        first += k;
      }
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
  b->select_items.reserve(static_cast<size_t>(n_select));
  b->results = *work;
  *work += AlignUp(std::max<int64_t>(out, 1));
}

// The select items (device addresses of each planned query's scores,
// block table, scratch and results) and both batch tables into the upload.
void DevicePlanner::FillBatch(const std::vector<Request>& requests,
                              const std::vector<Layout>& layouts,
                              const std::vector<bool>& planned, Batch* b) {
  const DevPtr pool = tables_->pool();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!planned[i]) continue;
    const Layout& l = layouts[i];
    const KvStoreConfig& config = *requests[i].config;
    const DevPtr in = in_dev_.ptr + l.in_off, work = work_dev_.ptr + l.work_off;
    const DevPtr results = work_dev_.ptr + b->results + l.out_off;
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
        a.member_first = in + h.member_first;
        a.member_last = in + h.member_last;
        a.members = pool;
        a.n_members = tables_->pool_bytes() / 4;
        a.budget = config.budget - (debug_.budget_one_short ? 1 : 0);
        a.recent_tokens = config.recent_tokens;
        a.page_size = config.quest_page_size;
        a.scratch = work + h.scratch + j * h.scratch_stride;
        a.totals = results + h.results + j * h.stride;
        a.out = a.totals + Section<dev::PlanTotals>(1);
        a.max_out = h.max_out;
        b->select_items.push_back(dev::ItemOf(a));
      }
    }
  }
  PutTable(b->score_items, b->score_items_off);
  PutTable(b->thread_base, b->thread_base_off);
  PutTable(b->select_items, b->select_items_off);
  PutTable(b->query_items, b->query_items_off);
}

// Copies a batch table into the upload at `off` (an empty one: nothing;
// memcpy from its null data would be undefined).
template <class T>
void DevicePlanner::PutTable(const std::vector<T>& table, int64_t off) {
  if (table.empty()) return;
  std::memcpy(in_host_.host + off, table.data(), table.size() * sizeof(T));
}

// Grows the pinned and device buffers to the call's bytes (the previous
// call synchronised, so nothing still uses them).
bool DevicePlanner::Reserve(int64_t in, int64_t work, int64_t out) {
  return Ok(Grow(rt_, in, &in_host_)) && Ok(Grow(rt_, out, &out_host_)) &&
         Ok(Grow(rt_, in, &in_dev_)) && Ok(Grow(rt_, work, &work_dev_));
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
  char* base = in_host_.host + l.in_off;
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
      for (int c = 0; c < x.k; ++c) {
        first[block + c] = members + x.offsets[c];
        last[block + c] = members + x.offsets[c + 1];
      }
      block += x.k;
      seg_first[s + 1] = block;
    }
    first[block] = 0;  // declared, unread with member_last
  }
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
    a.items = in_dev_.ptr + b.query_items_off;
    a.n_items = static_cast<int32_t>(b.query_items.size());
    a.pool = in_dev_.ptr;
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
    a.items = in_dev_.ptr + b.score_items_off;
    a.thread_base = in_dev_.ptr + b.thread_base_off;
    a.n_items = static_cast<int32_t>(b.score_items.size());
    a.dim = b.dim;
    a.q_pool = in_dev_.ptr;
    a.q_elems = in / 4;
    a.panel_pool = tables_->pool();
    a.panel_elems = tables_->pool_bytes() / 2;
    a.score_pool = work_dev_.ptr;
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
  a.items = in_dev_.ptr + b.select_items_off;
  a.n_items = static_cast<int32_t>(b.select_items.size());
  a.max_n = b.max_n;
  if (!launch(
          dev::SelectBlocksBatchOp(a, b.select_items),
          [k, a](void* st) { return k->SelectBlocksBatch(a, st); }, a.n_items,
          &ops_.select_ops, &ops_.select_items)) {
    return false;
  }
  return Ok(
      rt_.CopyD2H(out_host_.host, work_dev_.ptr + b.results, out, stream_));
}

void DevicePlanner::ReadPlans(const Layout& l, HeadPlan* plans) const {
  for (int g = 0; g < l.n_kv; ++g) {
    const Layout::Head& h = l.heads[g];
    for (int j = 0; j < l.nq; ++j) {
      const char* r = out_host_.host + l.out_off + h.results + j * h.stride;
      dev::PlanTotals totals;
      std::memcpy(&totals, r, sizeof(totals));
      const auto* blocks = reinterpret_cast<const dev::PlannedBlock*>(
          r + Section<dev::PlanTotals>(1));
      HeadPlan& p = plans[g * l.group + j];
      p.blocks.clear();
      // max_out covers every plan (MaxPlannedBlocks): never -1.
      for (int64_t b = 0; b < totals.blocks; ++b) {
        const dev::PlannedBlock& x = blocks[b];
        p.blocks.push_back({x.segment,
                            x.kind == dev::kPlannedCluster ? BlockKind::kCluster
                                                           : BlockKind::kPage,
                            x.id, x.begin, x.count});
      }
      p.tokens = totals.tokens;
    }
    if (!l.shared) continue;
    for (int i = 1; i < l.group; ++i) {
      plans[g * l.group + i] = plans[g * l.group];
    }
  }
}

}  // namespace ckv
