// The device backend, stage 1 (docs/device-backend.md):
// the one Transformer's ops on a device runtime (kernels/device/runtime.h),
// today the fake device (--backend fake). Activations, weights and the
// step's positions live in device memory; every op is a typed launch on one
// compute stream that declares the byte ranges it reads and writes, and
// whose body is the CPU backend's kernels::cpu:: call (single-threaded).
// Host/device traffic goes through mapped-pinned staging only.
//
// Attention: a store that keeps device rows gets the layer's new K,V rows
// written there by one append op (the host's copies come back with the
// step and are filled in before Commit: device_appends.cc; other caches
// get k and v back and append on the host); the host KvCache selects
// exactly as on the CPU backend (the host store stays authoritative), with
// q copied back and one synchronisation only for a layer whose selection
// reads queries (a sparse decode layer: planned on the device, the plans
// come back); the attended K/V rows not already on the device are gathered
// into pinned staging or copied from pinned segments, and an attention op
// over them writes `out` on the device. A part whose rows to copy exceed
// ResidencyOptions:: stream_chunk_bytes (a question after a long offloaded
// document) is streamed: its rows cross in chunks through two device landing
// buffers on a copy stream, each chunk attended into a running softmax state
// while the next one copies, then finished (device_streamed_attention.cc).
//
// Errors of the runtime never abort: the first one is kept (status()), every
// later op is skipped, Logits writes NaN, and Transformer::Forward returns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/device/op_launchers.h"
#include "kernels/device/runtime.h"
#include "model/backend/backend.h"
#include "model/backend/device/device_cache_rows.h"
#include "model/backend/device/device_index_builder.h"
#include "model/backend/device/device_planner.h"
#include "model/backend/device/pinned_arena.h"

namespace ckv {

// Faults planted on purpose, for the tests that show the runtime catches
// them (never set outside tests).
struct DeviceBackendDebug {
  // Reads the D2H staging of q/k/v and of the logits without synchronising
  // the stream first (the ordering checker reports the race; the lazy
  // schedule hands the host poisoned bytes).
  bool skip_sync_before_host_read = false;
  // Stages uploads in pageable host memory (async copies refuse it).
  bool pageable_staging = false;
  // Logits announce a host read of the device logits buffer (the runtime
  // refuses a device address as a host pointer).
  bool host_reads_device_ptr = false;
  // Segment rows from the heap instead of the pinned arena (store_env()),
  // so every attended row goes through the staging buffer as in stage 1.
  bool heap_arena = false;
  // No device planner in store_env(): the stores' policies plan on the
  // host, as in stage 1.
  bool host_selection = false;
  DevicePlannerDebug planner;
  // > 0: the planner's segment tables may take this many bytes (default: a
  // quarter of the device), to test eviction and fallback.
  int64_t table_bytes = 0;
  // No device index builder in store_env(): k-means on the host.
  bool host_kmeans = false;
  DeviceIndexBuilderDebug index_builder;
  // No device store rows in store_env(): block caches (copy mode), sinks
  // and tails keep their rows in host memory only, staged every step.
  bool host_cache_rows = false;
  // Weights of types other than F32/F16/BF16 uploaded dequantised to BF16,
  // as a CUDA runtime's launchers take them (on the fake, which otherwise
  // keeps every type as stored).
  bool bf16_weights = false;
  // No graphs: every op of the Transformer's regions launched one by one
  // (BackendOptions::device_graphs false).
  bool no_graphs = false;
  // Replays a region's graph whenever one exists for its (region, rows),
  // without checking that its ops still touch the same ranges (after a
  // buffer moved, the fake reports the stale graph's use after free).
  bool replay_stale_graphs = false;
  // Direct spans of at most this many bytes (K or V) are copied by one
  // copy_runs op per part; larger ones (whole segments) by DMA copies.
  // -1: kRunCopyMaxBytes; 0: every direct span by DMA.
  int64_t run_copy_max_bytes = -1;
  // Streamed attention copies a chunk into its landing buffer without
  // waiting for the attention of the chunk that used it two chunks before
  // (the ordering checker reports the overwrite).
  bool stream_skip_drain_wait = false;
  // K,V rows appended on the host as in stage 1 (q, k and v all come back
  // each layer, the new rows go up to the mirrors), not on the device.
  bool host_appends = false;
  // > 0: the pinned staging of appended rows' host copies holds at most
  // this many bytes before the caches are filled (a wait) mid-step
  // (default kAppendStageCap).
  int64_t append_stage_cap_bytes = 0;
  // FinishAppends reads the appended rows' host copies without waiting for
  // the device when no wait came after their op (a step without logits:
  // the ordering checker reports the race).
  bool skip_append_wait = false;
  // One attention op per part (each its own batch), as before batching:
  // the comparison for the batched op's launch count.
  bool one_op_per_part = false;
  // The planner builds no row lists: sparse decode layers wait for their
  // plans and the host builds the rows they attend (as before the lists).
  bool host_row_lists = false;
  // Copy mode keeps its host-decided block caches (each sparse layer
  // waits for its plans) instead of the planner's on the device.
  bool host_copy_mode = false;
  // The attention over row lists does not wait for the planner's
  // lists_ready event (the ordering checker reports the race).
  bool skip_lists_wait = false;
};

// The Transformer's regions (Backend::BeginRegion) on the device, counted
// per region run (device_graphs.cc).
struct GraphStats {
  int64_t captures = 0;  // graphs captured (then replayed)
  int64_t replays = 0;   // runs replayed from a graph
  int64_t eager = 0;     // runs launched op by op (first sight, moved, big)
};

// How the attended K/V rows reached the device (bytes, summed over calls).
struct AttendCopyStats {
  int64_t staged_bytes = 0;  // gathered on the host into pinned staging
  int64_t direct_bytes = 0;  // copied straight from pinned segment rows
  int64_t direct_copies = 0;
  // Of the direct bytes: runs copied by copy_runs ops (one per part).
  int64_t run_bytes = 0;
  int64_t run_ops = 0;
  // Rows read from store rows in device memory (block caches, sink and
  // tail mirrors): no copy at attention time. Not counted there: spans
  // over a planner's row lists (their rows are known on the device only).
  int64_t cached_rows = 0;
  int64_t listed_spans = 0;
  // Streamed parts: their K/V rows copied through the landing buffers
  // (not in staged_bytes or direct_bytes), chunks attended, and the
  // largest chunk (bytes of one landing buffer in use).
  int64_t streamed_parts = 0;
  int64_t streamed_chunks = 0;
  int64_t streamed_bytes = 0;
  int64_t largest_chunk_bytes = 0;
  // Unstreamed parts: attention ops launched for them, and the parts they
  // attended (consecutive parts of a layer share one op: the decode
  // sessions of a step are one batched attention per layer).
  int64_t attention_ops = 0;
  int64_t batched_parts = 0;
  // Attention launches (streamed chunks included) whose spans all share
  // one dtype (AttentionArgs::kv_dtype set: a device may use its tensor
  // cores for them).
  int64_t one_dtype_launches = 0;
  // K,V rows appended on the device (KvCache::AppendOnDevice): tokens,
  // append_rows ops (one per layer and K/V type), and the bytes of their
  // host copies (16-bit K and V, written through mapped memory).
  // Bytes of q, k and v rows copied back to the host for the caches'
  // appends and the host's selection (k and v only for host appends).
  int64_t qkv_bytes = 0;
  int64_t appended_tokens = 0;
  int64_t append_ops = 0;
  int64_t append_copy_bytes = 0;
  // Waits to fill the caches mid-step, the staging at its cap or full
  // with no other wait since the ops that wrote it.
  int64_t append_waits = 0;
};

class DeviceBackend final : public Backend {
 public:
  // Runs on `runtime`, which must outlive the backend. `name` and `device`
  // are what info() reports (device memory: the runtime's total bytes).
  DeviceBackend(kernels::device::Runtime& runtime, std::string name,
                std::string device, DeviceBackendDebug debug = {},
                ResidencyOptions residency = {});
  // Runs on `runtime`, which it owns (and which the pinned arena keeps
  // alive while segments hold its blocks).
  DeviceBackend(std::unique_ptr<kernels::device::Runtime> runtime,
                std::string name, std::string device,
                DeviceBackendDebug debug = {}, ResidencyOptions residency = {});
  ~DeviceBackend() override;

  DeviceBackend(const DeviceBackend&) = delete;
  DeviceBackend& operator=(const DeviceBackend&) = delete;

  absl::Status status() const override { return status_; }
  kernels::device::Runtime& runtime() { return *rt_; }
  // Weights, norms and biases uploaded so far (bytes of device memory).
  int64_t resident_bytes() const { return resident_bytes_; }
  const AttendCopyStats& attend_copies() const { return copies_; }
  // The pinned arena and the device planner (stores made with them must be
  // freed before a runtime the backend does not own).
  StoreEnv store_env() override;
  // The device planner (its counters: layers planned, table uploads,
  // evictions and fallbacks).
  const DevicePlanner& planner() const { return *planner_; }
  // The k-means builder (its counters: device jobs, keys read in place).
  const DeviceIndexBuilder& index_builder() const { return *index_builder_; }
  // The block caches' device rows (their copies: fill, staged, moved).
  const DeviceCacheArena& cache_rows() const { return *cache_rows_; }
  const GraphStats& graph_stats() const { return graph_stats_; }
  // The streamed attention's chunk in effect (ResidencyOptions', capped).
  int64_t stream_chunk_bytes() const { return stream_chunk_bytes_; }
  // Times the host waited for the compute stream: a decode step waits once
  // per layer whose selection reads queries (a sparse or recorded layer;
  // every layer of a cache that appends on the host), for its logits and
  // at EndStep; a step without logits once more for its appended rows.
  int64_t stream_syncs() const { return syncs_; }

  Activation NewActivation(int64_t width) override;
  Residency residency() const override;
  void BeginStep(absl::Span<const int64_t> positions) override;
  void EndStep() override;
  void BeginRegion(int region) override;
  void EndRegion() override;
  void Embed(const Matrix& table, absl::Span<const int32_t> tokens, float scale,
             Activation out) override;
  void MatMul(const Matrix& w, Activation x, Activation y) override;
  void AddBias(Activation x, absl::Span<const float> bias) override;
  void RmsNorm(Activation x, absl::Span<const float> weight, float eps,
               Activation out) override;
  void Rope(Activation x, int n_heads, const RopeSpec& rope) override;
  void Gate(FfnActivation act, Activation gate, Activation up,
            Activation out) override;
  void Add(Activation x, Activation y) override;
  void Attention(int layer, const AttentionSpec& spec,
                 absl::Span<const AttentionPart> parts, Activation q,
                 Activation k, Activation v, Activation out,
                 ForwardProfile* profile) override;
  // Hands the caches the host copies of the rows this step appended on
  // the device (device_appends.cc).
  void FinishAppends() override;
  void ReadRows(Activation a, std::vector<float>* out) override;
  void Logits(Activation x, absl::Span<const int64_t> rows,
              absl::Span<const float> norm, float eps, const Matrix& output,
              float softcap, std::vector<float>* out) override;

 protected:
  BackendInfo DoInfo() const override { return info_; }

 private:
  using DevPtr = kernels::device::DevPtr;
  using Range = kernels::device::Range;
  using Site = kernels::device::Site;

  static constexpr int64_t kAlign = 64;  // sections of a scratch
  // The appended rows' host copies held before the caches get them.
  static constexpr int64_t kAppendStageCap = int64_t{16} << 20;
  // Direct spans up to this size (K or V) are copied by one op per part.
  static constexpr int64_t kRunCopyMaxBytes = int64_t{64} << 10;
  static int64_t AlignUp(int64_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
  }

  // A weight matrix in device memory, in the type the ops read.
  struct DevMatrix {
    DevPtr ptr;
    kernels::DType type = kernels::DType::kF32;
    int64_t bytes = 0;
  };
  // Device memory that only grows.
  struct DevBuf {
    DevPtr ptr;
    int64_t bytes = 0;
  };
  // A host staging buffer: mapped-pinned (pageable only when planted).
  struct Staging {
    char* host = nullptr;
    int64_t bytes = 0;
    std::unique_ptr<char[]> pageable;
  };
  struct Buffer {
    int64_t width = 0;
    DevBuf mem;  // >= rows_ * width floats
  };
  // Where one attended span's rows lie in the part's KV scratch.
  struct SpanMeta {
    kernels::DType dtype = kernels::DType::kF32;
    int64_t count = 0;
    int64_t first_pos = 0;
    int64_t k_off = 0, v_off = 0;
    int64_t pos_off = -1;  // explicit positions, or -1: first_pos + r
    // Rows copied straight from pinned segment memory (a contiguous run of
    // the arena), not gathered into staging.
    bool direct = false;
    // Of the direct spans, a small run (a selected cluster): copied with
    // the part's other runs by one copy_runs op reading the mapped pinned
    // rows, not by DMA copies of its own.
    bool run = false;
    // A direct span named by a row list (a sparse selection over a pinned
    // segment head): copy_runs gathers its rows, one item per run of
    // consecutive rows (clusters are stored contiguously).
    bool listed = false;
    // Direct spans: the device view of the pinned K and V rows; runs: the
    // copy_runs items' count for each of K and V (1 unless listed).
    DevPtr k_src = {}, v_src = {};
    int64_t runs = 0;
    // Store rows in device memory (cache_rows_), read in place: a block
    // cache's through the row list uploaded at rows_off, or a run of a
    // sink/tail mirror (rows_off -1). cache_k/v: the ranges read.
    bool cached = false;
    Range cache_k = {}, cache_v = {};
    int64_t rows_off = -1;
    // A span over a planner's row lists (KvSpan::device_range): the
    // lists' device addresses (count entries) and their {first, n}.
    uint64_t list_rows = 0, list_positions = 0, list_range = 0;
  };
  // The rebased layout of one part's AttendSet. Offsets are the part's own
  // (staged section [0, staged_bytes), then the direct spans' K and V up to
  // `bytes`) until a batch places the part (Rebase): then they are offsets
  // in the batch's scratch.
  struct KvPlan {
    std::vector<SpanMeta> spans;                  // unique spans, by content
    std::vector<const kernels::KvSpan*> sources;  // of spans[i]
    std::vector<int> order;                  // per-head lists, concatenated
    std::vector<std::pair<int, int>> heads;  // [begin, count) into order
    int64_t n_runs = 0;                      // copy_runs items (K and V)
    int64_t staged_bytes = 0;  // staged rows, then lists: from staging
    int64_t bytes = 0;         // then the direct spans' K and V
  };
  // One part of a layer's attention: what its cache selected (valid until
  // the cache's next call) and its plan.
  struct PartPlan {
    AttendSet attend;
    KvPlan plan;
  };
  // The scratch of one batched attention op: its tables first (AttnSpanDesc
  // per entry of every member part, int32 (first, count) per head — per
  // query row when the batch has several parts — and the copy_runs items),
  // then each member's staged section, then each member's direct spans.
  struct BatchLayout {
    int64_t desc_off = 0, heads_off = 0, runs_off = 0;
    int64_t entries = 0, n_runs = 0;
    int64_t staged_bytes = 0, bytes = 0;
  };

  // Records the first error; true when `s` is OK.
  bool Ok(const absl::Status& s);
  bool ok() const { return status_.ok(); }
  // residency.budget_bytes 0: half the device.
  void Init(ResidencyOptions residency);
  void FreeAll();

  DevPtr Ptr(Activation a) const { return buffers_[a.id].mem.ptr; }
  int64_t Width(Activation a) const { return buffers_[a.id].width; }
  // The current step's rows of `a`, from `row`, `n` rows (all: n < 0).
  Range Rows(Activation a, int64_t row = 0, int64_t n = -1) const;

  bool GrowDevice(DevBuf& b, int64_t bytes);
  bool GrowStaging(Staging& s, int64_t bytes);
  // Waits for the compute stream (counted: stream_syncs()).
  bool Sync();
  // Copies `bytes` of a step input to `dst` from the step staging, without
  // waiting: the previous step's copies out of it finished at its EndStep
  // (only a staging that must grow mid-step waits first).
  bool StepUpload(DevPtr dst, const void* src, int64_t bytes);
  // Copies `bytes` of host memory to `dst` through `staging` (synchronises
  // the stream first when the staging's previous copy may be pending).
  bool Upload(DevPtr dst, const void* src, int64_t bytes, Staging& staging);
  // The device copy of a weight, norm or bias (uploaded at first use, keyed
  // by host address and size: stable for the backend's life).
  DevPtr Resident(const void* host, int64_t bytes);
  // True when the ops take matrices of type `t` as stored.
  bool TakesWeightType(kernels::DType t) const;
  // Resident() for a matrix: as stored, or dequantised to BF16 once.
  DevMatrix ResidentMatrix(const Matrix& m);
  // Enqueues an op: `body` is its host form, `device_launch` (may be
  // empty) its kernel on a runtime with launchers.
  void Run(std::string name, std::vector<Range> reads,
           std::vector<Range> writes,
           std::function<void(kernels::device::OpContext&)> body,
           std::function<absl::Status(void*)> device_launch,
           Site site = Site::Here());
  // The runtime's launcher `fn` bound to `args`, or empty without
  // launchers.
  template <class Args>
  std::function<absl::Status(void*)> Kernel(
      absl::Status (kernels::device::OpLaunchers::*fn)(const Args&, void*)
          const,
      const Args& args) const {
    if (launchers_ == nullptr) return {};
    return [l = launchers_, fn, args](void* stream) {
      return (l->*fn)(args, stream);
    };
  }

  // Attention pieces: q/k/v rows to pinned host memory; zero rows for the
  // caches after an error; each part's rows planned, then attended by one
  // op per run of consecutive unstreamed parts (a batch).
  // q/k/v rows to pinned host memory: the copies enqueued (EnqueueQkv;
  // *hq.. where they land), then waited for (AwaitQkv).
  // Every part's sparse decode plan (and row lists) queued and launched on
  // the planner's stream, reading the queries on the device; the
  // attention's stream waits for the lists. The host q rows, if fetched,
  // land at qkv_stage_ (q, then k and v when with_kv: room for them made
  // here). False after an error.
  bool LaunchSelects(int layer, absl::Span<const AttentionPart> parts,
                     Activation q, Activation k, bool with_kv);
  // q (k and v too when with_kv) to the host and the launched plans read
  // back, both waited for; false after an error.
  bool FetchQueries(Activation q, Activation k, Activation v, bool with_kv,
                    const float** hq, const float** hk, const float** hv);
  // with_kv false: q only (*hk, *hv null).
  bool EnqueueQkv(Activation q, Activation k, Activation v, bool with_kv,
                  const float** hq, const float** hk, const float** hv);
  bool AwaitQkv();
  // KV append on the device (device_appends.cc): each part whose cache
  // keeps device rows (KvCache::AppendOnDevice) gets its k, v rows written
  // there and into pinned host copies by one append_rows op;
  // placed_parts_[i] says which. True when every part was placed (q is
  // then all the host needs back).
  bool AppendOnDevice(int layer, int head_dim,
                      absl::Span<const AttentionPart> parts, Activation k,
                      Activation v);
  // Enqueues the append_rows op of append_items_ of one K/V type.
  void LaunchAppends(Activation k, Activation v, kernels::DType dtype,
                     DevPtr items, int64_t first, int64_t n, int n_kv,
                     int head_dim);
  // Fills the caches of fills_ (zeros after an error); waits first unless a
  // wait came after their ops.
  void FillPending();
  void AppendLost(int layer, absl::Span<const AttentionPart> parts,
                  int64_t kv_dim);
  void PlanSpans(const AttendSet& attend, int n_heads, int head_dim,
                 KvPlan* plan);
  // A span over a planner's row lists (KvSpan::device_range): read in
  // place (store rows or mapped pinned rows), m's list fields set.
  void ListedSpan(const kernels::KvSpan& s, int head_dim, SpanMeta* m);
  // Each sets m's source addresses (PinnedArena::Mapped) when true.
  bool IsDirect(const kernels::KvSpan& s, int head_dim, SpanMeta* m) const;
  bool IsListedPinned(const kernels::KvSpan& s, int head_dim,
                      SpanMeta* m) const;
  // Places the explicit position lists and the block caches' row lists of
  // the plan's spans from `off`; returns the end.
  static int64_t PlaceLists(KvPlan& plan, int64_t off);
  // Adds staged_shift to the plan's staged offsets (rows, lists) and
  // direct_shift to its direct spans'.
  static void Rebase(KvPlan& plan, int64_t staged_shift, int64_t direct_shift);
  // The split-K count of `a` for heads of at most max_rows rows and its
  // workspace (grown; a.workspace set); false after an error.
  bool SetSplits(kernels::device::AttentionArgs* a, int64_t max_rows,
                 int64_t* ws_bytes);
  // The ranges of the store rows the plan's cached spans read.
  void AddCachedReads(const KvPlan& plan, std::vector<Range>* reads);
  bool IsCached(const kernels::KvSpan& s, int head_dim, SpanMeta* m) const;
  bool CopyDirectSpans(const KvPlan& plan, DevPtr kv, int head_dim);
  // Appends the copy_runs items of the plan's runs for the scratch at kv
  // to run_items_.
  bool MakeRunItems(const KvPlan& plan, DevPtr kv, int head_dim);
  // Enqueues the copy_runs op of run_items_ (uploaded at `items`).
  void CopyRuns(DevPtr items);
  static void GatherRows(const KvPlan& plan, char* dst, int head_dim);
  // The table entry of span m (rows in the scratch at kv, or store rows).
  static kernels::device::AttnSpanDesc SpanDesc(const SpanMeta& m, DevPtr kv,
                                                int head_dim);
  // The most rows any query head of the plan attends.
  static int64_t MaxHeadRows(const KvPlan& plan);
  // The dtype every span of the plan shares with `so_far` (the dtype the
  // plans before it share; -2 for none yet), else -1 (AttentionArgs's
  // kv_dtype).
  static int32_t SharedDType(const KvPlan& plan, int32_t so_far);
  // Lays out the batch of parts_[batch_[i]] (BatchLayout), rebasing their
  // plans.
  void LayOutBatch(int n_heads, absl::Span<const AttentionPart> parts);
  // Writes the batch's span, head and run tables into the staged section
  // at dst, for the scratch at kv.
  void WriteBatchTables(char* dst, DevPtr kv, int n_heads, int head_dim,
                        absl::Span<const AttentionPart> parts) const;
  // Attends the batch (one op; RunBatch), then empties it.
  void AttendBatch(const AttentionSpec& spec,
                   absl::Span<const AttentionPart> parts, Activation q,
                   Activation out);
  void RunBatch(const AttentionSpec& spec,
                absl::Span<const AttentionPart> parts, Activation q,
                Activation out);
  // The attention op's arguments for query rows [row, row + n).
  kernels::device::AttentionArgs RowArgs(const AttentionSpec& spec, int64_t row,
                                         int64_t n, Activation q) const;
  // Enqueues the attention op (its host form reads the same tables).
  void RunAttention(std::string name, const kernels::device::AttentionArgs& a,
                    std::vector<Range> reads, std::vector<Range> writes);
  // Where the part's staged section goes in the pinned staging buffer
  // (null after an error; synchronises first when it must wrap).
  char* ReserveStaging(int64_t bytes);

  // Streamed attention (device_streamed_attention.cc). A piece: rows
  // [first, first + count) of the part plan's spans[span], at `off` in chunk
  // `chunk`'s landing buffer (K, then V at off + AlignUp(count * row)).
  struct Piece {
    int span = 0;
    int chunk = 0;
    int64_t first = 0, count = 0, off = 0;
  };
  struct StreamPlan {
    std::vector<Piece> pieces;                 // by span, then row
    std::vector<int> span_pieces;              // [span]: first piece; + end
    std::vector<int64_t> fill;                 // [chunk]: bytes used
    std::vector<int> chunk_pieces;             // [chunk]: first piece
    std::vector<int64_t> desc_off, heads_off;  // [chunk]: its tables
    std::vector<int> entries;                  // [chunk]: table entries
    std::vector<int64_t> max_rows;             // [chunk]: most rows of a head
    int64_t meta_bytes = 0;  // uploaded: positions, row lists, tables
    int64_t host_bytes = 0;  // then, host only: the gathered rows
  };
  // True when the plan's rows to copy exceed the stream chunk.
  bool StreamsPlan(const KvPlan& plan, int head_dim) const;
  void PlanStreamed(KvPlan& plan, int n_heads, int head_dim);
  void WriteStreamedTables(const KvPlan& plan, char* dst, DevPtr kv,
                           int head_dim) const;
  bool GrowLandings(int64_t bytes);
  // Enqueues chunk c's copies on the copy stream (after the attention of
  // chunk c - 2 read its landing buffer).
  bool CopyChunk(const KvPlan& plan, int c, const char* staged, int head_dim);
  void AttendStreamed(const AttentionSpec& spec, const AttentionPart& p,
                      KvPlan& plan, Activation q, Activation out);
  // Copies `bytes` of device memory at `src` to *out (D2H through the
  // logits staging, synchronise, read).
  bool Download(DevPtr src, int64_t bytes, float* out);

  // Graph regions (device_graphs.cc). Inside a region Run defers its ops;
  // EndRegion replays the region's graph when the deferred ops touch the
  // same ranges as the captured ones, captures them the second time the
  // same ranges come, else launches them. Any other runtime call first
  // launches what is deferred (FlushDeferred) and leaves the region
  // uncaptured this time.
  struct Deferred {
    kernels::device::Op op;
    Site site;
  };
  struct RegionGraph {
    std::vector<kernels::device::Op> shape;  // names and ranges, no bodies
    kernels::device::Graph graph;            // id -1: none
    bool failed = false;                     // capture refused: stay eager
  };
  void FlushDeferred();
  void LaunchAll(std::vector<Deferred>& ops);
  void Capture(RegionGraph& g, std::vector<Deferred>& ops);
  void DropGraph(RegionGraph& g);
  static bool SameShape(const std::vector<kernels::device::Op>& shape,
                        const std::vector<Deferred>& ops);

  std::shared_ptr<kernels::device::Runtime> owned_;  // destroyed last
  kernels::device::Runtime* rt_;
  const kernels::device::OpLaunchers* launchers_ = nullptr;  // rt_'s
  DeviceBackendDebug debug_;
  BackendInfo info_;
  absl::Status status_;
  kernels::device::Stream stream_;

  std::vector<Buffer> buffers_;
  int64_t rows_ = 0;
  std::vector<int64_t> pos_;  // host copy of the step's positions
  DevBuf pos_dev_, tok_dev_, kv_dev_, gathered_dev_, logits_dev_, picked_dev_,
      attn_ws_dev_;
  int64_t kv_dev_used_ = 0;
  Staging qkv_stage_, kv_stage_, logits_stage_, upload_stage_;
  // The step's small inputs (positions, token ids, picked rows): bump
  // allocated from BeginStep (StepUpload), reset once EndStep has
  // synchronised.
  Staging step_stage_;
  int64_t step_stage_used_ = 0;
  int64_t syncs_ = 0;  // Sync() calls
  // Streamed attention: chunk size, the copy stream, two landing buffers
  // with their events, and the running softmax state.
  int64_t stream_chunk_bytes_ = 0;
  kernels::device::Stream copy_stream_;
  kernels::device::Event stream_start_, filled_[2], drained_[2];
  // Recorded after a layer's q/k/v: the planner's gather waits for it.
  kernels::device::Event queries_ready_;
  int64_t qkv_bytes_ = 0;  // the layer's q/k/v bytes in qkv_stage_
  DevBuf landing_[2], state_dev_;
  StreamPlan stream_plan_;
  // copies_.streamed_bytes as of the last EndStep, for residency() (any
  // thread).
  std::atomic<int64_t> streamed_bytes_{0};
  int64_t kv_stage_used_ = 0;
  std::map<std::pair<const void*, int64_t>, DevPtr> resident_;
  int64_t resident_bytes_ = 0;
  // The layer's parts (reused across calls) and the batch being built:
  // indices of consecutive unstreamed parts, laid out by LayOutBatch.
  std::vector<PartPlan> parts_;
  std::vector<int> batch_;
  BatchLayout layout_;
  std::vector<int64_t> batch_shifts_;  // members' staged sections
  std::vector<kernels::device::ScatterItem> run_items_;
  std::vector<float> lost_;             // zero K/V rows appended after an error
  // The step's appends on the device: each placed part's host copy in
  // append_stage_ (K rows [n][kv_dim], then V) until FinishAppends; the
  // items of a layer's ops; syncs_ when the last op was enqueued.
  struct PendingFill {
    KvCache* cache = nullptr;
    int layer = 0;
    int64_t n = 0;
    int64_t k_off = 0, v_off = 0;  // in append_stage_
    int64_t kv_dim = 0;
  };
  std::vector<PendingFill> fills_;
  Staging append_stage_;
  int64_t append_stage_used_ = 0;
  int64_t append_sync_mark_ = -1;
  std::vector<char> placed_parts_;
  std::vector<const KvCache*> part_caches_;  // AppendOnDevice scratch
  // The step's caches (KvCache::FinishSelect at FinishAppends).
  std::vector<KvCache*> step_caches_;
  std::vector<AppendTarget> targets_;
  std::vector<kernels::device::AppendItem> append_items_;
  std::vector<kernels::DType> item_types_;  // of append_items_
  std::vector<uint16_t> lost_zeros_;
  std::shared_ptr<PinnedArena> arena_;  // segment rows (store_env())
  std::shared_ptr<DevicePlanner> planner_;
  std::shared_ptr<DeviceIndexBuilder> index_builder_;
  std::shared_ptr<DeviceCacheArena> cache_rows_;
  AttendCopyStats copies_;
  bool in_region_ = false, region_pure_ = true;
  int region_ = -1;
  std::vector<Deferred> deferred_;
  std::map<std::pair<int, int64_t>, RegionGraph> graphs_;  // (region, rows)
  GraphStats graph_stats_;
};

// MakeBackend(kFake): a DeviceBackend owning a new FakeRuntime made from
// the fake_* options; an error of the fake's set-up is returned.
absl::StatusOr<std::unique_ptr<Backend>> MakeFakeDeviceBackend(
    const BackendOptions& options);

}  // namespace ckv
