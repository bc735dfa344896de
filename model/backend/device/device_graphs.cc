// DeviceBackend's graph regions (Backend::BeginRegion): the Transformer's
// runs of ops between attentions are deferred, then replayed from a graph
// captured once per (region, rows) while their ops touch the same ranges.
// A decode step of L layers is then 2L graph launches plus the attentions
// instead of ~10 launches per layer. What a region's ops read beyond their
// ranges (scalars) is fixed per region by the Backend contract; their
// variable inputs (positions, activations) are read from device memory.
#include <utility>

#include "model/backend/device/device_backend.h"

namespace ckv {

namespace dev = kernels::device;

namespace {

// Larger steps (prefill chunks) vary in size: launched op by op.
constexpr int64_t kMaxGraphRows = 64;

bool SameRanges(const std::vector<dev::Range>& a,
                const std::vector<dev::Range>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].ptr.addr != b[i].ptr.addr || a[i].bytes != b[i].bytes) {
      return false;
    }
  }
  return true;
}

}  // namespace

void DeviceBackend::BeginRegion(int region) {
  FlushDeferred();
  if (debug_.no_graphs) return;
  in_region_ = true;
  region_pure_ = true;
  region_ = region;
}

void DeviceBackend::EndRegion() {
  if (!in_region_) return;
  in_region_ = false;
  std::vector<Deferred> ops = std::move(deferred_);
  deferred_.clear();
  if (!ok() || ops.empty()) return;
  if (!region_pure_ || rows_ > kMaxGraphRows) {
    ++graph_stats_.eager;
    LaunchAll(ops);
    return;
  }
  RegionGraph& g = graphs_[{region_, rows_}];
  const bool same = SameShape(g.shape, ops);
  if (g.graph.id >= 0 && (same || debug_.replay_stale_graphs)) {
    Ok(rt_->Replay(g.graph, stream_));
    ++graph_stats_.replays;
    return;
  }
  if (!same) {  // first sight, or its buffers moved: capture next time
    DropGraph(g);
    g.failed = false;
    g.shape.clear();
    for (const Deferred& d : ops) {
      g.shape.push_back(dev::Op{d.op.name, d.op.reads, d.op.writes, {}, {}});
    }
    ++graph_stats_.eager;
    LaunchAll(ops);
    return;
  }
  if (g.failed) {
    ++graph_stats_.eager;
    LaunchAll(ops);
    return;
  }
  Capture(g, ops);
}

// The ops of a pure region, seen before with the same ranges: recorded
// into a graph (not run), then the graph replayed. A capture the runtime
// refuses leaves the region eager; the ops then run one by one.
void DeviceBackend::Capture(RegionGraph& g, std::vector<Deferred>& ops) {
  absl::Status s = rt_->BeginCapture(stream_);
  if (s.ok()) {
    for (const Deferred& d : ops) {
      s = rt_->Launch(d.op, stream_, d.site);
      if (!s.ok()) break;
    }
    absl::StatusOr<dev::Graph> graph = rt_->EndCapture(stream_);
    if (s.ok() && graph.ok()) {
      g.graph = *graph;
      ++graph_stats_.captures;
      ++graph_stats_.replays;
      Ok(rt_->Replay(g.graph, stream_));
      return;
    }
  }
  g.failed = true;
  ++graph_stats_.eager;
  LaunchAll(ops);
}

void DeviceBackend::DropGraph(RegionGraph& g) {
  if (g.graph.id >= 0) rt_->DestroyGraph(g.graph).IgnoreError();
  g.graph = dev::Graph{};
}

void DeviceBackend::LaunchAll(std::vector<Deferred>& ops) {
  for (Deferred& d : ops) {
    if (!ok()) return;
    Ok(rt_->Launch(std::move(d.op), stream_, d.site));
  }
}

void DeviceBackend::FlushDeferred() {
  if (!in_region_) return;
  region_pure_ = false;
  if (deferred_.empty()) return;
  std::vector<Deferred> ops = std::move(deferred_);
  deferred_.clear();
  LaunchAll(ops);
}

bool DeviceBackend::SameShape(const std::vector<dev::Op>& shape,
                              const std::vector<Deferred>& ops) {
  if (shape.size() != ops.size()) return false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (shape[i].name != ops[i].op.name ||
        !SameRanges(shape[i].reads, ops[i].op.reads) ||
        !SameRanges(shape[i].writes, ops[i].op.writes)) {
      return false;
    }
  }
  return true;
}

}  // namespace ckv
