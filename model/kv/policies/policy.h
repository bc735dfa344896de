// Selection policies (docs/clusterkv.md "Selection", docs/design.md "Where a
// change goes"): which clustered tokens a decode query attends. A policy is one
// class behind this interface, in one file of model/kv/policies/, plus one
// line in registry.cc; ClusteredKvStore keeps sinks, segments, tail, cache
// and the quality record, and asks its policy for everything else.
#pragma once

#include "model/kv/kv_config.h"
#include "model/kv/segment.h"
#include "model/kv/selection.h"

namespace ckv {

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;

  // Unique lower-case name: flags, the wire and reports use it.
  virtual const char* name() const = 0;
  // False: every decode step attends every token (no index, no plan).
  virtual bool selects() const { return true; }
  // False: Plan and PlanEach never read the queries (a plan from positions
  // alone): a backend with its queries in device memory need not copy
  // them to the host for it (KvCache::SelectReadsQueries).
  virtual bool reads_queries() const { return true; }
  // True for a reference made to measure others against (e.g. it reads
  // every key each step): benchmarks report its quality, not its speed.
  virtual bool evaluation_only() const { return false; }
  // The per-segment indexes Plan reads. The store builds them (segment.h,
  // IndexSegmentLayers) for the sparse layers of every segment that closes;
  // a fork may switch to this policy only when its parent built them.
  virtual IndexSet indexes() const = 0;
  // Plans one decode step of one sparse layer and KV head (ctx): the
  // clustered rows to attend, as blocks of the segments in ctx. `qs` holds
  // n_q post-RoPE queries of ctx.head_dim: one query head, or, for
  // gqa_selection = per_kv_head, the group's n_q query heads that share one
  // plan. Called only when selects(); never with an index missing.
  virtual void Plan(const PlanContext& ctx, const float* const* qs, int n_q,
                    HeadPlan* out) = 0;
  // gqa_selection = per_query_head: plans each of the group's n_q query
  // heads on its own, out[i] = the plan of qs[i] alone, exactly as
  // Plan(ctx, &qs[i], 1, &out[i]) would. A policy may share work between
  // the heads (clusterkv scores them in one pass over the centroids).
  virtual void PlanEach(const PlanContext& ctx, const float* const* qs, int n_q,
                        HeadPlan* out) {
    for (int i = 0; i < n_q; ++i) Plan(ctx, qs + i, 1, out + i);
  }
};

}  // namespace ckv
