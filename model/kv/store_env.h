// What a clustered store gets from the backend that runs its steps
// (Backend::store_env()): where its segments' rows live and, optionally,
// who plans its sparse decode layers and who clusters its segments. A store
// made without one uses the heap and its own SelectionPolicy. Forks and
// snapshot restores share their parent's (the server's SessionManager passes
// the backend's).
#pragma once

#include <memory>
#include <vector>

#include "model/kv/cache_rows.h"
#include "model/kv/host_arena.h"
#include "model/kv/index_builder.h"
#include "model/kv/kv_config.h"
#include "model/kv/segment.h"
#include "model/kv/selection.h"

namespace ckv {

// A store's block cache of one (layer, KV head) kept on the device by its
// planner (copy mode; DeviceRowLists). Opaque to the store.
class DeviceBlockCache {
 public:
  virtual ~DeviceBlockCache() = default;
};

// Where a device planner writes one queued layer's row lists (the rows
// each planned query attends, built on the device from its plan, so that
// the attention needs no host round trip; kernels/device/
// selection_threads.h RowListItem): per KV head g and planned query j
// (nq of them: 1 with gqa_selection = per_kv_head, else the group), at
// index g * nq + j, device addresses of rows (int32 [cap]: stored rows),
// positions (int64 [cap]) and ranges (int64 [n_segments][2]: segment s's
// entries {first, n}, segments in the order queued). Filled when the call
// is launched (valid), before its plans are read; the lists hold until
// the backend's step ends.
//
// Copy mode kept on the device (cache_mode copy, when the planner makes
// block caches: LayerPlanner::NewBlockCache): the store sets, before
// Queue, `caches` (per KV head g its cache of the layer), `cache_step`
// (the step number its residency ages by: the host BlockCache's) and
// where each segment's stored rows of each KV head are (seg_keys /
// seg_values[s * n_kv + g]: device rows, or host rows of the pinned arena
// the device reads in place). The lists then name rows of caches[g]'s
// arena, in plan order (the host's copy-mode order), one range per query
// at ranges[...] + 0; arena_keys / arena_values[g] (device addresses,
// arena_rows[g] rows) are set when the call is launched.
struct DeviceRowLists {
  bool valid = false;
  int nq = 0;
  int64_t cap = 0;
  std::vector<uint64_t> rows, positions, ranges;
  std::vector<DeviceBlockCache*> caches;
  int64_t cache_step = 0;
  std::vector<const uint16_t*> seg_keys, seg_values;
  std::vector<uint64_t> arena_keys, arena_values;
  std::vector<int64_t> arena_rows;
};

// Plans every query head of one sparse layer of a decode query in place of
// the store's SelectionPolicy: a device backend's planner runs the policy's
// scoring and selection on its device (model/backend/device/
// device_planner.h). Its plans must equal the policy's exactly: the
// cross-backend tests compare attended positions per (step, layer, head).
class LayerPlanner {
 public:
  virtual ~LayerPlanner() = default;

  // Whether it plans for stores of this config (else their policy does).
  virtual bool Plans(const KvStoreConfig& config) const = 0;
  // plans[h] for h < shape.n_heads: query head h's plan for its query
  // (q: [n_heads][head_dim], post-RoPE) over `segments` (whose indexes of
  // `layer` are built) in `layer`; with gqa_selection = per_kv_head the plan
  // of the group's queries, in every head of the group. False when it could
  // not plan (a device error, which its backend reports): the store then
  // plans with its policy.
  virtual bool PlanLayer(const KvStoreConfig& config, const KvShape& shape,
                         const std::vector<const Segment*>& segments, int layer,
                         const float* q, HeadPlan* plans) = 0;

  // The same planning, queued (KvCache::PrepareSelect) for the next
  // RunQueued, which writes `plans` and sets *planned (left false when it
  // could not plan: the store plans itself then). Every argument must stay
  // valid and unchanged until RunQueued returns. A planner without batches
  // queues nothing. `lists` (optional): the planner may also build the
  // layer's row lists on its device (*lists, valid once launched); its
  // backend may then read the plans only at the step's end (every
  // argument stays valid until then).
  virtual void Queue(const KvStoreConfig& /*config*/, const KvShape& /*shape*/,
                     const std::vector<const Segment*>& /*segments*/,
                     int /*layer*/, const float* /*q*/, HeadPlan* /*plans*/,
                     bool* /*planned*/, DeviceRowLists* /*lists*/) {}
  // Plans everything queued since the last call (one batch: one upload and
  // one synchronisation on a device).
  virtual void RunQueued() {}
  // Whether Queue builds the row lists it is given (a store asks for them
  // only then).
  virtual bool BuildsRowLists() const { return false; }
  // A block cache on its device for one (layer, KV head) of a copy-mode
  // store (rows of head_dim, R = cache_steps), or null: the store's host
  // BlockCache keeps the rows then.
  virtual std::unique_ptr<DeviceBlockCache> NewBlockCache(int /*head_dim*/,
                                                          int /*cache_steps*/) {
    return nullptr;
  }
};

struct StoreEnv {
  std::shared_ptr<HostArena> arena;       // segment rows; null: the heap
  std::shared_ptr<LayerPlanner> planner;  // null: the store's policy plans
  // Runs the k-means of closing segments (on the ClusterWorker's thread,
  // or inline); null: a CpuIndexBuilder on that thread.
  std::shared_ptr<IndexBuilder> index_builder;
  // Rows of the block caches (cache_mode copy); null: host memory.
  std::shared_ptr<CacheRowsFactory> cache_rows;
};

}  // namespace ckv
