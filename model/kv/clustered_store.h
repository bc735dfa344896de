// The per-session clustered KV store (ClusterKV): sinks, immutable clustered
// segments and a tail in the host tier; a working set holding what decode
// steps attend (sinks, tail, dense layers, selection index, and a
// cluster-granular cache of selected blocks). Implements KvCache: prefill and
// multi-token appends attend densely; single-token decode steps in layers >=
// dense_layers attend sinks + the policy's selection + tail. What is selected,
// and which per-segment indexes are built, is its SelectionPolicy's
// (model/kv/policies/policy.h). Sliding-window layers (KvShape::layer_window)
// are never indexed or selected: they attend the rows of their window densely.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/kv/block_cache.h"
#include "model/kv/cluster_worker.h"
#include "model/kv/kv_config.h"
#include "model/kv/policies/policy.h"
#include "model/kv/row_buffer.h"
#include "model/kv/segment.h"
#include "model/kv/store_env.h"
#include "model/kv_cache.h"

namespace ckv {

struct KvMemoryStats {
  int64_t host_bytes = 0;         // everything this store references
  int64_t host_shared_bytes = 0;  // part of host_bytes shared with forks
  // The working set decode steps attend (sinks, tail, dense layers, index,
  // cache arenas; see .cc): host memory on the CPU backend, what a device
  // backend holds in device memory. The wire names it device_bytes.
  int64_t working_set_bytes = 0;
};

// Cumulative time of the sparse decode Selects of a store (wall clock of
// the calling thread): waiting for a segment index still being built,
// planning (scoring clusters or pages, ordering, budget), and making the
// selected blocks resident in the block cache (lookups + copies).
struct SelectTimings {
  int64_t calls = 0;  // sparse Selects (one per layer and decode step)
  int64_t wait_ns = 0;
  int64_t plan_ns = 0;
  int64_t cache_ns = 0;
};

// What the last recorded decode Select (one query token) of a layer >=
// dense_layers saw; model/kv/quality.h measures against it.
struct DecodeRecord {
  bool valid = false;
  bool dense = false;           // every token was attended (no selection)
  int64_t q_pos = 0;            // position of the query token
  int64_t clustered_begin = 0;  // clustered positions then: [begin, end)
  int64_t clustered_end = 0;
  std::vector<float> q;  // [n_heads][head_dim], post-RoPE
};

// The state of a store between calls, for snapshots (model/kv/snapshot.h):
// host-tier rows and segments with their built indexes. The working set
// (cache arenas) is not part of it: a restored store starts with an empty
// cache.
struct StoreParts {
  KvShape shape;
  KvStoreConfig config;
  int64_t n_tokens = 0;
  int64_t sink_rows = 0;  // min(n_tokens, config.sink_tokens)
  int64_t tail_rows = 0;  // open rows after the last segment
  // Per layer: [n_kv_heads][rows][head_dim] of config.kv_dtype.
  std::vector<std::vector<uint16_t>> sink_k, sink_v, tail_k, tail_v;
  // Oldest first, contiguous from position config.sink_tokens.
  std::vector<std::shared_ptr<Segment>> segments;
};

class ClusteredKvStore : public KvCache {
 public:
  // `worker` runs clustering off the compute thread; null = inline.
  // `env` (model/kv/store_env.h): the segments' rows' arena and the layer
  // planner of the backend that runs the store's steps
  // (Backend::store_env()); empty: the heap and the store's own policy.
  // Forks share it.
  ClusteredKvStore(const KvShape& shape, const KvStoreConfig& config,
                   ClusterWorker* worker, StoreEnv env = {});

  int64_t num_tokens() const override { return n_tokens_; }
  absl::Status Reserve(int64_t n, AppendKind kind) override;
  void Append(int layer, int64_t n, const float* k, const float* v) override;
  // With mirrors (a device backend's store rows): the backend writes the
  // rows; sinks and tail are filled on the host by FillAppended.
  bool AppendOnDevice(int layer, int64_t n,
                      std::vector<AppendTarget>* targets) override;
  void FillAppended(int layer, int64_t n, const uint16_t* k,
                    const uint16_t* v) override;
  // Sparse decode Selects and recorded decode Selects read the queries.
  bool SelectReadsQueries(int layer, int64_t n_q) const override;
  void Select(int layer, const LayerQuery& query, AttendSet* out) override;
  // Queues the sparse decode layer's plan with the backend's planner (with
  // its row lists when the planner builds them: ListsEligible).
  void PrepareSelect(int layer, const LayerQuery& query) override;
  // The listed Selects' statistics and records (clustered_store_listed.cc).
  void FinishSelect() override;
  void Commit(int64_t n) override;

  // A new store sharing this one's segments read-only, with copies of its
  // sinks and tail and an empty block cache. FAILED_PRECONDITION while a
  // call is in flight. The child may use another policy, budget,
  // gqa_selection, recent_tokens or cache_steps (INVALID_ARGUMENT for other
  // changes, or for a policy that needs an index the segments lack).
  absl::StatusOr<std::unique_ptr<ClusteredKvStore>> Fork() const {
    return Fork(config_);
  }
  absl::StatusOr<std::unique_ptr<ClusteredKvStore>> Fork(
      const KvStoreConfig& child_config) const;
  // A fork holding only the sinks and the first `n_segments` segments (1 ..
  // segments().size()), with an empty tail: this store's state right after
  // those segments closed (the prefix cache's entries, server/prefix_cache.h).
  // FAILED_PRECONDITION during a call; INVALID_ARGUMENT for a bad count or
  // when the sinks are not full.
  absl::StatusOr<std::unique_ptr<ClusteredKvStore>> ForkPrefix(
      size_t n_segments) const;

  // Prompt calls (AppendKind::kPrompt) close one segment per run of `tokens`
  // positions aligned to multiples of `tokens` (the first from the sinks'
  // end), so that stores fed the same prompt prefix hold the same
  // segments up to its last whole block; 0 (default): one segment per call.
  // Not copied by forks, not in snapshots.
  void set_prompt_block_tokens(int64_t tokens) { prompt_block_ = tokens; }
  int64_t prompt_block_tokens() const { return prompt_block_; }

  // This store's parts, after waiting for every layer's index (segments are
  // shared, not copied). FAILED_PRECONDITION during a call.
  absl::StatusOr<StoreParts> Export() const;
  // A store made of `parts` (model/kv/store_parts.cc): INVALID_ARGUMENT
  // naming the first inconsistency (row counts, positions, array sizes, an
  // index that is missing, out of range or unordered), so hostile parts
  // cannot yield a store that reads out of bounds. Segments are used as
  // they are (no k-means runs; rows of clustered heads still in position
  // order, as the snapshot reader makes them, are reordered by cluster) and
  // must have no index job pending (ticket 0). `env` as for the
  // constructor.
  static absl::StatusOr<std::unique_ptr<ClusteredKvStore>> Restore(
      StoreParts parts, ClusterWorker* worker, StoreEnv env = {});

  const KvStoreConfig& config() const { return config_; }
  const KvShape& shape() const { return shape_; }
  KvMemoryStats memory() const;
  CacheStats cache_stats() const;
  const SelectTimings& select_timings() const { return timings_; }
  void ResetSelectTimings() { timings_ = SelectTimings{}; }
  // Closed segments, oldest first (their indexes may still be building).
  const std::vector<std::shared_ptr<Segment>>& segments() const {
    return segments_;
  }
  int64_t clustered_tokens() const;
  int64_t tail_tokens() const { return open_rows_.empty() ? 0 : open_rows_[0]; }
  int64_t sink_count() const { return sink_rows_.empty() ? 0 : sink_rows_[0]; }
  // Blocks until every segment's index of `layer` is built.
  void WaitForIndex(int layer) const;
  // Whether every segment's index of every layer is built (never blocks).
  bool IndexReady() const;
  // k-means clusters of segment `i` summed over KV heads, at the first
  // layer that has an index (0 when none or not built yet).
  int SegmentClusters(size_t i) const;

  // When on, decode Selects record the selected positions per query head.
  void set_record_selection(bool on) { record_selection_ = on; }
  // Records the decode Selects of `layer` only (as set_record_selection does
  // for every layer) until called again; -1: none. Invalidates the layer's
  // previous record, so a valid record read later is of a later step
  // (model/kv/recall_probe.h).
  void RecordNextDecode(int layer);
  const std::vector<int64_t>& selected_positions(int layer, int head) const {
    return recorded_[layer][head];
  }
  // Recorded with the selection (also for dense decode Selects, then with
  // dense = true and selected_positions left as they were).
  const DecodeRecord& decode_record(int layer) const {
    return decode_records_[layer];
  }
  // Host-tier rows of (layer, kv_head) in position order: sinks, each
  // segment, then the tail (including rows appended but not committed).
  // Valid until the next Reserve/Append/Commit.
  std::vector<kernels::KvSpan> HostSpans(int layer, int kv_head) const;

 private:
  bool IsSparseLayer(int layer) const;  // decode steps select here
  bool NeedsIndex(int layer) const;     // segments build an index here
  void GrowOpen(int64_t rows);
  void StoreRow(const float* src, uint16_t* dst) const;
  void CloseOpenRows(int64_t rows);
  // WaitForIndex (wait) and IndexReady (not) on indexed_upto_.
  bool AdvanceIndexed(int layer, bool wait) const;
  // The store's buffer (sinks or tail) of token i of `layer`'s current
  // append, *rows its row count (the token's row), *sink which.
  RowBuffer& NextRow(int layer, int64_t i, bool* sink, int64_t** rows);
  // Counts n appended tokens of `layer`; true when they end a prompt's
  // rows of the layer (FinishPromptLayer is due).
  bool EndAppend(int layer, int64_t n);
  void FinishPromptLayer(int layer);
  void ScheduleIndex(const std::shared_ptr<Segment>& seg,
                     std::vector<int> layers);
  void SelectDense(int layer, AttendSet* out);
  void SelectSparse(int layer, const LayerQuery& query, AttendSet* out);
  void PlanHeads(int layer, const float* q);
  void GatherRows(int layer, int g, int h, int64_t step, BlockCache& cache);
  void AddSelectedSpans(int layer, int g, int src, const BlockCache& cache,
                        std::vector<kernels::KvSpan>* spans);
  void RecordSelected(int layer, int src, int h);
  // Row lists on the device (clustered_store_listed.cc): whether a sparse
  // decode Select of `layer` can name them (the planner builds them,
  // zero-copy, every segment's rows resident or in the pinned arena), the
  // Select over them, and its bookkeeping once the plans are read.
  bool ListsEligible(int layer) const;
  void SelectListed(int layer, AttendSet* out);
  void FinishListed(int layer);
  // Copy mode kept on the device (clustered_store_listed.cc): the
  // planner's block caches, one per sparse (layer, KV head), when it makes
  // them (then the host BlockCaches only count, copy_on_device_); a
  // queued layer's caches and segment rows; the spans over the arenas.
  void MakeDeviceCaches();
  void FillCacheRequest(int layer, DeviceRowLists* lists);
  void SelectCacheListed(int layer, AttendSet* out);
  void RecordDecode(int layer, const LayerQuery& query, bool dense);
  // Over the rows' mirrors (device memory on a device backend) when
  // `mirror`, as a Select hands them to the backend; else host rows.
  kernels::KvSpan SinkSpan(int layer, int kv_head, bool mirror) const;
  kernels::KvSpan OpenSpan(int layer, int kv_head, bool mirror) const;
  // Brings the layer's sink and tail mirrors up to date (before a Select's
  // spans name them).
  void SyncMirrors(int layer);
  // Over the segment's resident rows when `mirror` and the backend keeps
  // them (device memory), else over its host rows.
  kernels::KvSpan SegmentSpan(const Segment& seg, int layer, int kv_head,
                              bool mirror) const;
  const CacheRows* Resident(const Segment& seg, int layer) const;

  KvShape shape_;
  KvStoreConfig config_;
  std::unique_ptr<SelectionPolicy> policy_;  // null: unregistered (dense)
  IndexSet indexes_;  // built for the sparse layers of closing segments
  ClusterWorker* worker_;
  StoreEnv env_;           // env_.arena: never null
  LayerPlanner* planner_;  // env_.planner when it plans for config_, or null
  // PrepareSelect queued this layer's plan and RunQueued wrote plans_.
  bool preplanned_ = false;
  int preplanned_layer_ = -1;
  // A sparse layer's Select over row lists; its plans are read back at the
  // step's end and its bookkeeping is done by FinishSelect. Per layer.
  struct ListedSelect {
    DeviceRowLists lists;
    std::vector<HeadPlan> plans;
    bool planned = false;  // plans written
    bool pending = false;  // Selected, bookkeeping due
    int64_t step = 0;
    std::vector<const Segment*> segments;
  };
  std::vector<ListedSelect> listed_;
  bool copy_on_device_ = false;
  bool cache_copies_rows_ = false;  // copy mode with host-decided caches
  std::vector<std::vector<std::unique_ptr<DeviceBlockCache>>> device_caches_;
  int listed_layer_ = -1;  // PrepareSelect queued this layer with lists
  int64_t n_tokens_ = 0;
  // Current call.
  int64_t reserved_ = 0;
  int64_t committed_in_call_ = 0;
  AppendKind kind_ = AppendKind::kGenerated;
  // The prompt segments being built (one per block, or one).
  std::vector<std::shared_ptr<Segment>> pending_;
  int64_t prompt_block_ = 0;  // set_prompt_block_tokens
  // Host tier.
  std::vector<RowBuffer> sinks_, open_;
  std::vector<int64_t> sink_rows_, open_rows_;  // per layer, incl. uncommitted
  std::vector<int64_t> uncommitted_;  // per layer: appended since Commit
  // Rows AppendOnDevice placed whose host copy FillAppended has not yet
  // written, per layer in append order (sink or tail, and the row there);
  // and whether the prompt's last rows of the layer are among them.
  struct PlacedRow {
    bool sink;
    int64_t row;
  };
  std::vector<std::vector<PlacedRow>> placed_;
  std::vector<size_t> placed_filled_;
  std::vector<char> prompt_layer_due_;
  int64_t open_first_pos_;
  std::vector<std::shared_ptr<Segment>> segments_;
  // Per layer: segments_[0, n) are known indexed (AdvanceIndexed; segments
  // are only appended, and a store made from others starts at 0).
  mutable std::vector<size_t> indexed_upto_;
  // Cluster cache per (layer, kv head), its rows from env_.cache_rows
  // (device memory on a device backend); decode step per layer.
  std::vector<std::vector<BlockCache>> caches_;
  std::vector<int64_t> steps_;
  // Scratch of the last Select (the spans point here).
  std::vector<const Segment*> seg_view_;
  // A sparse step's seg_view_[i] rows on the device (null: host rows).
  std::vector<const CacheRows*> resident_view_;
  std::vector<HeadPlan> plans_;
  std::vector<std::vector<int32_t>> sel_rows_;
  // Copy mode: the position of each of sel_rows_[head]'s cache rows.
  std::vector<std::vector<int64_t>> sel_pos_;
  struct RowRun {
    int32_t segment;  // index into seg_view_, or -1: the cache arena
    int64_t offset;   // into sel_rows_[head]
    int64_t count;
  };
  std::vector<std::vector<RowRun>> sel_runs_;
  std::vector<std::vector<int32_t>> by_segment_;  // GatherRows scratch
  std::vector<size_t> first_span_;  // SelectSparse scratch: head -> span
  std::vector<const float*> plan_qs_;
  bool Records(int layer) const {
    return record_selection_ || layer == record_layer_;
  }
  bool record_selection_ = false;
  int record_layer_ = -1;  // RecordNextDecode
  std::vector<std::vector<std::vector<int64_t>>> recorded_;
  std::vector<DecodeRecord> decode_records_;  // per layer
  SelectTimings timings_;
};

}  // namespace ckv
