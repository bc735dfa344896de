// DevicePlanner's row lists and deferred calls (device_planner.h): the
// lists' tables and addresses, and the plans read back at the step's end.
#include <cstring>
#include <utility>

#include "model/backend/device/device_planner.h"
#include "model/backend/device/device_planner_layout.h"

namespace ckv {

namespace dev = kernels::device;

void DevicePlanner::DeferQueued() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!call_->launched) {
    *call_ = Call{};
    return;
  }
  deferred_.push_back(std::exchange(call_, std::make_unique<Call>()));
  ++deferred_calls_;
}

void DevicePlanner::ReadDeferred() {
  std::lock_guard<std::mutex> lock(mu_);
  if (deferred_.empty()) return;
  if (Ok(rt_.Synchronize(stream_))) {
    for (auto& c : deferred_) ReadCall(*c);
  }
  deferred_.clear();
}

void DevicePlanner::EndStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!deferred_.empty()) return;  // ReadDeferred first
  step_has_lists_ = false;
  host_chunks_.Reset(rt_);
  device_chunks_.Reset(rt_);
}

void DevicePlanner::ReadCall(Call& c) {
  if (!Ok(rt_.HostRead(c.out_host, c.out)) || !CacheCountersOk(c)) return;
  for (size_t i = 0; i < c.requests.size(); ++i) {
    if (!c.planned[i]) continue;
    ReadPlans(c.layouts[i], c.out_host, c.requests[i].plans);
    *c.requests[i].planned = true;
    ++layers_planned_;
  }
  ++batches_;
}

void DevicePlanner::FillLists(const Layout& l,
                              const dev::threads::RowListItem* items,
                              DeviceRowLists* lists) {
  lists->nq = l.nq;
  lists->cap = l.cap;
  lists->rows.clear();
  lists->positions.clear();
  lists->ranges.clear();
  for (int64_t i = 0; i < int64_t{l.n_kv} * l.nq; ++i) {
    lists->rows.push_back(items[i].rows);
    lists->positions.push_back(items[i].positions);
    lists->ranges.push_back(items[i].ranges);
  }
  lists->valid = true;
}

// Planned query j's row-list problem: its select item's plan and block
// table, the segments' positions and storage order, its lists.
dev::threads::RowListItem DevicePlanner::RowItemOf(const Layout& l, int g,
                                                   int j,
                                                   const dev::SelectArgs& a,
                                                   DevPtr in, DevPtr work) {
  const Layout::Head& h = l.heads[g];
  const ListOffsets o = ListLayout(l.cap, l.n_segs, h.max_out);
  const DevPtr lists = work + h.lists + int64_t{j} * h.list_stride;
  dev::RowListTargets t;
  t.seg_pos = in + h.seg_pos;
  t.seg_sorted = in + h.seg_sorted;
  t.rows = lists + o.rows;
  t.positions = lists + o.positions;
  t.ranges = lists + o.ranges;
  t.dest = lists + o.dest;
  t.seg_row_of = in + h.seg_row_of;
  t.row_of = a.members;  // the segment tables' pool
  t.n_row_of = a.n_members;
  t.cap = l.cap;
  dev::threads::RowListItem it = dev::RowListItemOf(a, t);
  // Quest's plans hold pages only: a cluster table of no clusters.
  if (l.quest) it.seg_first = (in + h.list_seg_first).addr;
  return it;
}

// Per KV head: each segment's first position, storage order (1: by
// cluster) and row_of in the table pool (elements; -1: none), for the
// row lists (quest: and their table of no clusters).
void DevicePlanner::FillListTables(const Layout& l, const Request& r) {
  char* base = call_->in_host + l.in_off;
  for (int g = 0; g < l.n_kv; ++g) {
    auto* pos = reinterpret_cast<int64_t*>(base + l.heads[g].seg_pos);
    auto* sorted = reinterpret_cast<int32_t*>(base + l.heads[g].seg_sorted);
    auto* row_of = reinterpret_cast<int64_t*>(base + l.heads[g].seg_row_of);
    for (int s = 0; s < l.n_segs; ++s) {
      const Segment& seg = *(*r.segments)[s];
      pos[s] = seg.first_pos();
      sorted[s] = seg.layer(r.layer).heads[g].rows_by_cluster() ? 1 : 0;
      const int64_t at = l.entries[s]->heads[g].row_of;
      row_of[s] = at < 0 ? -1 : at / 4;  // pool elements
    }
    if (l.quest) {
      std::memset(base + l.heads[g].list_seg_first, 0,
                  sizeof(int64_t) * (l.n_segs + 1));
    }
  }
}

void DevicePlanner::ReadPlans(const Layout& l, const char* out_host,
                              HeadPlan* plans) const {
  for (int g = 0; g < l.n_kv; ++g) {
    const Layout::Head& h = l.heads[g];
    for (int j = 0; j < l.nq; ++j) {
      const char* r = out_host + l.out_off + h.results + j * h.stride;
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
