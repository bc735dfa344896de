// The device backend's LayerPlanner (model/kv/store_env.h): clusterkv's and
// quest's selection of one sparse layer of a decode query on the device,
// with the phase ops of kernels/device/ over the segments' F16 centroid
// panels or F32 page bounds (the CPU's exact score bits), so the device
// gives the policies' plans exactly (quest: threads::kSelectTopPages). Stage
// 2 of docs/device-backend.md: the segments' panels and members are
// resident in a device pool across steps and shared by forks
// (SegmentTables); each call uploads only a block table of 16 bytes per
// cluster and the batch's item tables through one pinned staging buffer
// (the queries too when they come from the host; from the backend they
// are gathered on the device: LaunchQueued), runs two ops —
// ScoreClustersBatchOp over every (store, KV head,
// segment), SelectBlocksBatchOp over every planned query (each query head,
// or the group's summed query with gqa_selection = per_kv_head) — and
// reads the plans back with one copy and one synchronisation. A batch
// (Queue, then RunQueued: every store of a decode step, for one layer) is
// one call. A request queued with DeviceRowLists also gets its row lists
// built on the device (a row_lists op after the selections); its backend
// may then defer the call (DeferQueued: no wait, the plans are read by
// FinishStep at the step's end), attending the lists once lists_ready.
// Each call's buffers are taken for the step (StepChunks) and reused
// after FinishStep.
// One call at a time (a mutex); the runtime must outlive the planner, which
// keeps `keep_alive` (the runtime's owner, or null).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "kernels/device/runtime.h"
#include "kernels/device/selection_phases.h"
#include "kernels/device/selection_threads.h"
#include "model/backend/device/grow_buffer.h"
#include "model/backend/device/segment_tables.h"
#include "model/backend/device/step_chunks.h"
#include "model/kv/store_env.h"

namespace ckv {

// Faults planted on purpose, for the tests that show the cross-backend
// comparison catches them (never set outside tests).
struct DevicePlannerDebug {
  bool budget_one_short = false;  // plans budget - 1 tokens
  // Gathers the queries without waiting for the backend's queries_ready
  // event (the ordering checker reports the race with their producer).
  bool skip_query_wait = false;
  // Makes no block caches (NewBlockCache null): copy-mode stores keep the
  // host-decided caches, each sparse layer waiting for its plans.
  bool no_block_caches = false;
};

class DevicePlanner final : public LayerPlanner {
 public:
  // `table_bytes`: the most device memory the resident segment tables
  // may take (beyond it a call falls back to the store's policy).
  DevicePlanner(kernels::device::Runtime& runtime,
                std::shared_ptr<void> keep_alive, int64_t table_bytes,
                DevicePlannerDebug debug = {});
  ~DevicePlanner() override;

  bool Plans(const KvStoreConfig& config) const override;
  bool PlanLayer(const KvStoreConfig& config, const KvShape& shape,
                 const std::vector<const Segment*>& segments, int layer,
                 const float* q, HeadPlan* plans) override;
  void Queue(const KvStoreConfig& config, const KvShape& shape,
             const std::vector<const Segment*>& segments, int layer,
             const float* q, HeadPlan* plans, bool* planned,
             DeviceRowLists* lists) override;
  // Plans the queue reading every query from the host.
  void RunQueued() override;
  // For the backend that computes the queries: a query queued from host
  // rows inside [host, host + bytes) (where the backend's copy of the
  // layer's q rows will land) is read on the device at the same offset
  // from `device` (the q rows themselves) by LaunchQueued, and its host
  // rows are not read. Until ClearQueryRows.
  void SetQueryRows(const float* host, uint64_t device, int64_t bytes);
  void ClearQueryRows() { SetQueryRows(nullptr, 0, 0); }
  // RunQueued in two halves: LaunchQueued enqueues the call, gathering the
  // device-read queries once `queries_ready` (recorded by the backend
  // after them, on its stream) has fired; FinishQueued waits for the call
  // and writes the plans.
  void LaunchQueued(const kernels::device::Event& queries_ready);
  void FinishQueued();
  // In place of FinishQueued: the launched call's plans are read by
  // FinishStep. lists_ready is recorded after the call's last work.
  void DeferQueued();
  // Whether the last launched call built row lists; the event the
  // attention over them waits for (recorded on the planner's stream).
  bool lists_launched() const;
  const kernels::device::Event& lists_ready() const { return lists_ready_; }
  // Reads the deferred calls' plans (one synchronisation of the planner's
  // stream, when there are any): at the step's end, before the stores'
  // KvCache::FinishSelect.
  void ReadDeferred();
  // After the backend's last wait of a step (nothing reads the step's row
  // lists any more): the step's buffers are reused from the next call.
  void EndStep();
  // Whether requests get row lists (off: their stores select on the host
  // from the plans). The backend that calls DeferQueued, ReadDeferred and
  // EndStep turns it on.
  void EnableRowLists(bool on);
  bool BuildsRowLists() const override;
  // Copy mode on the device (device_planner_cache.cc): a DevicePagedCache
  // on the planner's stream; a request whose lists name caches gets one
  // cache_lists op after its row lists (the lists then over the caches'
  // arenas, DeviceRowLists).
  std::unique_ptr<DeviceBlockCache> NewBlockCache(int head_dim,
                                                  int cache_steps) override;
  // Where host rows of the pinned arena are on the device (a copy-mode
  // request's segment rows): map(p, bytes, &device address) true for rows
  // the device reads in place; any other address is taken as a device
  // address (resident rows).
  void SetHostRowsMap(std::function<bool(const void*, int64_t, uint64_t*)> map);
  // cache_lists ops launched.
  int64_t cache_ops() const;
  // When p lies in the table allocation of a live block cache of this
  // planner (its arena's K or V rows): the device range from p to that
  // allocation's end (what an attention over the arena reads).
  bool FindCacheRows(const void* p, kernels::device::Range* rows) const;
  // Deferred calls so far, and row-list ops launched.
  int64_t deferred_calls() const;
  int64_t list_ops() const;

  // The first runtime error (every later call returns false), or OK.
  absl::Status status() const;
  // Layers planned on the device so far; calls that fell back to the
  // store's policy because the tables did not fit; segment-table uploads.
  int64_t layers_planned() const;
  int64_t table_fallbacks() const;
  int64_t table_uploads() const;
  int64_t table_evictions() const;
  // Calls that launched work (each one upload and one synchronisation,
  // however many layers it planned).
  int64_t batches() const;
  // Their score and select ops (one each per call, however many stores,
  // KV heads, segments and queries) and the problems those covered:
  // (store, KV head, segment) scorings and planned queries (each was an op
  // of its own before batching).
  // gather: calls whose queries were read on the device (LaunchQueued),
  // and their requests.
  struct OpCounts {
    int64_t score_ops = 0, select_ops = 0, score_items = 0, select_items = 0;
    int64_t gather_ops = 0, gather_items = 0;
  };
  OpCounts op_counts() const;

 private:
  using DevPtr = kernels::device::DevPtr;
  struct Layout;  // device_planner.cc
  struct Batch;
  struct Call;  // a launched call, until its plans are read
  // One store's layer: PlanLayer's arguments and where the answer goes.
  struct Request {
    const KvStoreConfig* config = nullptr;
    const KvShape* shape = nullptr;
    const std::vector<const Segment*>* segments = nullptr;
    int layer = 0;
    const float* q = nullptr;
    uint64_t device_q = 0;  // the query's rows on the device, or 0
    HeadPlan* plans = nullptr;
    bool* planned = nullptr;
    DeviceRowLists* lists = nullptr;
  };

  bool Ok(const absl::Status& s);
  // Plans the requests in one call (caller holds mu_; LaunchCall, then
  // FinishCall); a request whose tables do not fit keeps *planned false.
  // queries_ready null: every query from the host.
  void LaunchCall(std::vector<Request> requests,
                  const kernels::device::Event* queries_ready);
  void FinishCall();
  // The results of call c (synchronised and host-readable) into its
  // requests' plans.
  void ReadCall(Call& c);
  // The row lists' addresses of a launched request, from its row-list
  // items (n_kv * nq of them, as FillBatch made them).
  static void FillLists(const Layout& l,
                        const kernels::device::threads::RowListItem* items,
                        DeviceRowLists* lists);
  // The request's layout at the call's running offsets (advanced), or
  // false when its segment tables do not fit (fall back).
  bool MakeLayout(const Request& r, int64_t tick, int64_t* in, int64_t* work,
                  int64_t* out, Layout* l);
  static bool CountBlocks(const Request& r, const Layout& l, int g,
                          int64_t* total);
  static void AddScoreItems(const Request& r, const Layout& l, int g, Batch* b);
  bool Reserve(int64_t in, int64_t work, int64_t out);
  void Fill(const Layout& l, const Request& r);
  void FillListTables(const Layout& l, const Request& r);
  static kernels::device::threads::RowListItem RowItemOf(
      const Layout& l, int g, int j, const kernels::device::SelectArgs& a,
      DevPtr in, DevPtr work);
  static kernels::device::threads::QueryItem QueryItemOf(const Layout& l,
                                                         uint64_t src);
  // The call's item tables (a request whose head_dim differs from the
  // batch's is left unplanned) and results region, after the requests'.
  void LayOutBatch(const std::vector<Request>& requests,
                   const std::vector<Layout>& layouts,
                   std::vector<bool>* planned, int64_t* in, int64_t* work,
                   int64_t out, Batch* b);
  template <class T>
  void PutTable(const std::vector<T>& table, int64_t off);
  void FillBatch(const std::vector<Request>& requests,
                 const std::vector<Layout>& layouts,
                 const std::vector<bool>& planned, Batch* b);
  // The call's ops (the queries' gather after queries_ready, the scores,
  // the selections) and the results' copy back (in, work, out: the call's
  // bytes of each buffer).
  bool LaunchBatch(const Batch& b, int64_t in, int64_t work, int64_t out,
                   const kernels::device::Event* queries_ready);
  void ReadPlans(const Layout& l, const char* out_host, HeadPlan* plans) const;
  // Copy mode (device_planner_cache.cc): a request's caches prepared and
  // its sections (per KV head: segment blocks and rows in the upload,
  // requests in the work buffer, counters read back) at the running
  // offsets; false when a cache could not be made (fall back).
  bool MakeCacheLayout(const Request& r, Layout* l, int64_t* in, int64_t* work,
                       int64_t* out);
  void FillCacheTables(const Layout& l, const Request& r);
  // The cache items of KV head g (after its row items, the last nq of
  // b->row_items).
  void AddCacheItem(const Layout& l, const Request& r, int g, Batch* b);
  bool LaunchCacheLists(const Batch& b);
  static void FillCacheLists(const Layout& l, DeviceRowLists* lists);
  // False (the planner's status an error) when a cache of the call could
  // not serve its requests.
  bool CacheCountersOk(const Call& c);

  kernels::device::Runtime& rt_;
  std::shared_ptr<void> keep_alive_;
  DevicePlannerDebug debug_;
  mutable std::mutex mu_;
  kernels::device::Stream stream_;
  kernels::device::Event lists_ready_;
  // The step's buffers: each call's upload and plans read back (pinned),
  // its upload on the device and its work (scores, scratch, plans, row
  // lists); reused after FinishStep.
  StepChunks<PinnedBuffer> host_chunks_;
  StepChunks<DeviceBuffer> device_chunks_;
  absl::Status status_;
  std::unique_ptr<SegmentTables> tables_;
  std::vector<Request> queued_;
  std::unique_ptr<Call> call_;
  std::vector<std::unique_ptr<Call>> deferred_;  // until FinishStep
  // SetQueryRows' mapping (host rows, their device address, bytes).
  const char* query_host_ = nullptr;
  uint64_t query_device_ = 0;
  int64_t query_bytes_ = 0;
  int64_t calls_ = 0, batches_ = 0, layers_planned_ = 0, table_fallbacks_ = 0;
  int64_t deferred_calls_ = 0, list_ops_ = 0, cache_ops_ = 0;
  std::function<bool(const void*, int64_t, uint64_t*)> host_rows_map_;
  // The live caches' allocations (base -> bytes), kept by their on_move
  // (their own lock: a cache moves inside a planner call).
  struct CacheRegistry {
    std::mutex mu;
    std::map<uint64_t, int64_t> tables;
  };
  std::shared_ptr<CacheRegistry> cache_registry_ =
      std::make_shared<CacheRegistry>();
  bool row_lists_ = false;
  bool step_has_lists_ = false;  // a call of this step built row lists
  OpCounts ops_;
};

}  // namespace ckv
