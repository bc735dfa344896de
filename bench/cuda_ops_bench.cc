// GPU microbenchmark of the ClusterKV kernels (kernels/cuda): decode
// attention dense vs sparse at 32k context / B = 1024 (32 query heads, 8 KV
// heads, head_dim 128, BF16 KV) with the kernel the device backend runs
// (SpanAttention over span tables, split as AttentionSplits cuts it; the
// sparse spans read row lists as the planner's listed spans do), batched
// k-means of a 32k segment, and cluster selection; prefill attention (a
// 2048-row chunk after 2048 rows, BF16 KV) on the tensor-core tiles
// (attention_tiles.h) against the span kernel, with their largest
// difference. Times are medians of
// CUDA-event-timed repeats after a warm-up; inputs are random (never zeros).
// Prints a short table last. Exits 1 when no CUDA device is present
// (device-check.sh relies on it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention_spans.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/kmeans.h"
#include "kernels/cuda/selection_ops.h"
#include "kernels/device/op_launchers.h"
#include "kernels/device/op_tables.h"
#include "kernels/device/selection_phases.h"

namespace ckv::kernels::cuda {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// A new device buffer holding v.
template <typename T>
T* Upload(const std::vector<T>& v) {
  T* p = nullptr;
  Check(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)), "malloc");
  Check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
        "upload");
  return p;
}

std::vector<uint16_t> RandomBf16(std::mt19937& rng, size_t n) {
  std::vector<uint16_t> v(n);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : v) {
    const float f = d(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

std::vector<float> RandomF32(std::mt19937& rng, size_t n) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : v) x = d(rng);
  return v;
}

// Median milliseconds of `reps` runs of fn (after 3 warm-ups).
double TimeMs(cudaStream_t s, int reps, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "event");
  Check(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(a, s), "record");
    fn();
    Check(cudaEventRecord(b, s), "record");
    Check(cudaEventSynchronize(b), "sync");
    Check(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct Row {
  std::string name;
  double ms;
  std::string note;
};

constexpr int kHeads = 32, kKvHeads = 8, kHd = 128;
constexpr int64_t kCtx = 32768, kBudget = 1024, kAttended = kBudget + 16 + 320;

uint64_t Addr(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

// One SpanAttention launch of n_heads query heads (one query row after
// every row) over `spans`, heads[h] = {first span, 1}, split as the
// backend splits it; returns the median ms.
double TimeSpanAttention(cudaStream_t s, const float* q, const int64_t* q_pos,
                         const device::AttnSpanDesc* spans,
                         const int32_t* heads, int64_t rows, float* out) {
  SpanAttentionParams p;
  p.q = q;
  p.q_pos = q_pos;
  p.spans = spans;
  p.heads = heads;
  p.out = out;
  p.n_q = 1;
  p.n_heads = kHeads;
  p.head_dim = kHd;
  p.scale = 0.088f;
  p.splits = device::AttentionSplits(1, kHeads, rows);
  float* ws = nullptr;
  Check(cudaMalloc(
            &ws, device::AttentionWorkspaceBytes(1, kHeads, kHd, p.splits) + 4),
        "malloc");
  p.workspace = p.splits > 1 ? ws : nullptr;
  const double ms =
      TimeMs(s, 50, [&] { Check(SpanAttention(p, s), "span attention"); });
  cudaFree(ws);
  return ms;
}

void BenchDecode(cudaStream_t s, std::mt19937& rng, std::vector<Row>* rows) {
  const size_t kv_elems = size_t{kKvHeads} * kCtx * kHd;
  auto* k = Upload(RandomBf16(rng, kv_elems));
  auto* v = Upload(RandomBf16(rng, kv_elems));
  auto* q = Upload(RandomF32(rng, kHeads * kHd));
  auto* q_pos = Upload(std::vector<int64_t>{kCtx});  // after every row
  float* out = nullptr;
  Check(cudaMalloc(&out, kHeads * kHd * 4), "malloc");
  const int64_t head_bytes = kCtx * kHd * 2;
  const int group = kHeads / kKvHeads;
  // Dense: query head h reads every row of its KV head (one span per KV
  // head, shared by the group).
  std::vector<device::AttnSpanDesc> dense(kKvHeads);
  for (int g = 0; g < kKvHeads; ++g) {
    device::AttnSpanDesc& d = dense[g];
    d.k = Addr(k) + g * head_bytes;
    d.v = Addr(v) + g * head_bytes;
    d.bytes = head_bytes;
    d.count = kCtx;
    d.dtype = static_cast<int32_t>(DType::kBF16);
  }
  std::vector<int32_t> dense_heads(2 * kHeads);
  for (int h = 0; h < kHeads; ++h) {
    dense_heads[2 * h] = h / group;
    dense_heads[2 * h + 1] = 1;
  }
  auto* d_dense = Upload(dense);
  auto* d_dense_heads = Upload(dense_heads);
  const double dense_ms =
      TimeSpanAttention(s, q, q_pos, d_dense, d_dense_heads, kCtx, out);
  const double dense_gb = 2.0 * kv_elems * 2 / (dense_ms * 1e6);
  rows->push_back({"decode dense 32k", dense_ms,
                   std::to_string(static_cast<int>(dense_gb)) +
                       " GB/s (unique K+V bytes)"});
  // Sparse: each query head its own list of kAttended distinct rows
  // (ascending, positions = rows), as a listed span reads them.
  std::vector<int32_t> lists(kHeads * kAttended);
  std::vector<int64_t> positions(lists.size());
  for (int h = 0; h < kHeads; ++h) {
    std::vector<int32_t> all(kCtx);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + kAttended);
    std::copy_n(all.begin(), kAttended, lists.begin() + h * kAttended);
    std::copy_n(all.begin(), kAttended, positions.begin() + h * kAttended);
  }
  auto* d_lists = Upload(lists);
  auto* d_positions = Upload(positions);
  std::vector<device::AttnSpanDesc> sparse(kHeads);
  std::vector<int32_t> sparse_heads(2 * kHeads);
  for (int h = 0; h < kHeads; ++h) {
    sparse[h] = dense[h / group];
    sparse[h].rows = Addr(d_lists + h * kAttended);
    sparse[h].positions = Addr(d_positions + h * kAttended);
    sparse[h].count = kAttended;
    sparse_heads[2 * h] = h;
    sparse_heads[2 * h + 1] = 1;
  }
  auto* d_sparse = Upload(sparse);
  auto* d_sparse_heads = Upload(sparse_heads);
  const double sparse_ms =
      TimeSpanAttention(s, q, q_pos, d_sparse, d_sparse_heads, kAttended, out);
  const double bytes = double{kHeads} * kAttended * (kHd * 2 * 2 + 4 + 8);
  rows->push_back({"decode sparse B=1024", sparse_ms,
                   std::to_string(static_cast<int>(bytes / (sparse_ms * 1e6))) +
                       " GB/s (listed rows per q head)"});
  for (void* ptr :
       {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(q),
        static_cast<void*>(q_pos), static_cast<void*>(out),
        static_cast<void*>(d_dense), static_cast<void*>(d_dense_heads),
        static_cast<void*>(d_lists), static_cast<void*>(d_positions),
        static_cast<void*>(d_sparse), static_cast<void*>(d_sparse_heads)}) {
    cudaFree(ptr);
  }
}

// A prefill chunk of kRows query rows at positions [kRows, 2 kRows) over
// 2 kRows keys of each KV head (the chunk's own rows last, causal), as the
// backend launches it (one span per KV head, no row lists): the tiles and
// the span kernel (tiles off) on the same inputs.
void BenchPrefill(cudaStream_t s, std::mt19937& rng, std::vector<Row>* rows) {
  constexpr int kRows = 2048;
  constexpr int64_t kKeys = 2 * kRows;
  const size_t kv_elems = size_t{kKvHeads} * kKeys * kHd;
  auto* k = Upload(RandomBf16(rng, kv_elems));
  auto* v = Upload(RandomBf16(rng, kv_elems));
  auto* q = Upload(RandomF32(rng, size_t{kRows} * kHeads * kHd));
  std::vector<int64_t> pos(kRows);
  std::iota(pos.begin(), pos.end(), int64_t{kRows});
  auto* q_pos = Upload(pos);
  const int64_t head_bytes = kKeys * kHd * 2;
  std::vector<device::AttnSpanDesc> spans(kKvHeads);
  for (int g = 0; g < kKvHeads; ++g) {
    spans[g].k = Addr(k) + g * head_bytes;
    spans[g].v = Addr(v) + g * head_bytes;
    spans[g].bytes = head_bytes;
    spans[g].count = kKeys;
    spans[g].dtype = static_cast<int32_t>(DType::kBF16);
  }
  std::vector<int32_t> heads(2 * kHeads);
  for (int h = 0; h < kHeads; ++h) {
    heads[2 * h] = h / (kHeads / kKvHeads);
    heads[2 * h + 1] = 1;
  }
  auto* d_spans = Upload(spans);
  auto* d_heads = Upload(heads);
  const size_t out_elems = size_t{kRows} * kHeads * kHd;
  float *out_tiles = nullptr, *out_span = nullptr;
  Check(cudaMalloc(&out_tiles, out_elems * 4), "malloc");
  Check(cudaMalloc(&out_span, out_elems * 4), "malloc");
  SpanAttentionParams p;
  p.q = q;
  p.q_pos = q_pos;
  p.spans = d_spans;
  p.heads = d_heads;
  p.n_q = kRows;
  p.n_heads = kHeads;
  p.head_dim = kHd;
  p.scale = 0.088f;
  p.kv_dtype = static_cast<int32_t>(DType::kBF16);
  // Causal: row i sees kRows + i + 1 keys; 4 flops per (key, dim) (QK, PV).
  const double flops =
      4.0 * kHeads * kHd * (double{kRows} * kRows + kRows * (kRows + 1) / 2.0);
  p.out = out_tiles;
  const double tiles_ms =
      TimeMs(s, 10, [&] { Check(SpanAttention(p, s), "tile attention"); });
  p.tiles = false;
  p.out = out_span;
  const double span_ms =
      TimeMs(s, 3, [&] { Check(SpanAttention(p, s), "span attention"); });
  std::vector<float> a(out_elems), b(out_elems);
  Check(cudaMemcpy(a.data(), out_tiles, out_elems * 4, cudaMemcpyDeviceToHost),
        "download");
  Check(cudaMemcpy(b.data(), out_span, out_elems * 4, cudaMemcpyDeviceToHost),
        "download");
  double diff = 0.0;
  for (size_t i = 0; i < out_elems; ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  char note[128];
  std::snprintf(note, sizeof(note), "%.1f TFLOP/s, max |tiles - span| %.2e",
                flops / (tiles_ms * 1e9), diff);
  rows->push_back({"prefill 2k after 2k, tiles", tiles_ms, note});
  std::snprintf(note, sizeof(note), "%.2f TFLOP/s, %.1fx the tiles' time",
                flops / (span_ms * 1e9), span_ms / tiles_ms);
  rows->push_back({"prefill 2k after 2k, span", span_ms, note});
  for (void* ptr :
       {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(q),
        static_cast<void*>(q_pos), static_cast<void*>(d_spans),
        static_cast<void*>(d_heads), static_cast<void*>(out_tiles),
        static_cast<void*>(out_span)}) {
    cudaFree(ptr);
  }
}

void BenchKMeans(cudaStream_t s, std::mt19937& rng, std::vector<Row>* rows) {
  const int k = static_cast<int>(kCtx / 80) + 1;  // 410
  auto* keys = Upload(RandomBf16(rng, size_t{kKvHeads} * kCtx * kHd));
  std::vector<int32_t> seeds(kKvHeads * k);
  for (int g = 0; g < kKvHeads; ++g) {
    for (int c = 0; c < k; ++c) seeds[g * k + c] = c * 79;
  }
  auto* ds = Upload(seeds);
  float* cent = nullptr;
  int32_t *asg = nullptr, *sizes = nullptr, *iters = nullptr;
  Check(cudaMalloc(&cent, size_t{kKvHeads} * k * kHd * 4), "malloc");
  Check(cudaMalloc(&asg, size_t{kKvHeads} * kCtx * 4), "malloc");
  Check(cudaMalloc(&sizes, size_t{kKvHeads} * k * 4), "malloc");
  Check(cudaMalloc(&iters, kKvHeads * 4), "malloc");
  KMeansBatch b{
      keys, DType::kBF16,          kCtx * kHd, kHd, kKvHeads, kCtx, kHd,
      k,    KMeansMetric::kCosine, cent,       asg, sizes};
  void* ws = nullptr;
  Check(cudaMalloc(&ws, KMeansWorkspaceBytes(b)), "malloc");
  const double ms = TimeMs(s, 5, [&] {
    Check(KMeansRun(b, ds, 20, ws, KMeansWorkspaceBytes(b), iters, nullptr, s),
          "kmeans");
  });
  std::vector<int32_t> it(kKvHeads);
  Check(cudaMemcpy(it.data(), iters, kKvHeads * 4, cudaMemcpyDeviceToHost),
        "download");
  rows->push_back({"kmeans 8x32k k=410", ms,
                   std::to_string(*std::max_element(it.begin(), it.end())) +
                       " iterations (max 20)"});
  for (void* ptr : {static_cast<void*>(keys), static_cast<void*>(ds),
                    static_cast<void*>(cent), static_cast<void*>(asg),
                    static_cast<void*>(sizes), static_cast<void*>(iters), ws}) {
    cudaFree(ptr);
  }
}

// One layer's selection at 32k: per KV head, score 2048 clusters (F16
// panels, kernels/cuda/selection_ops.cu) for its 4 query heads, then
// select_blocks for each query (B = 1024, one segment).
void BenchSelect(cudaStream_t s, std::mt19937& rng, std::vector<Row>* rows) {
  const int64_t n_c = kCtx / 16, group = kHeads / kKvHeads;
  std::vector<uint16_t> panels(static_cast<size_t>(n_c) * kHd);
  for (uint16_t& h : panels) h = static_cast<uint16_t>(0x3000 + rng() % 0x0c00);
  std::vector<int64_t> member_first(n_c + 1);
  for (int64_t c = 0; c <= n_c; ++c) member_first[c] = c * 16;
  std::vector<int32_t> members(static_cast<size_t>(kCtx));
  std::iota(members.begin(), members.end(), 0);
  auto* q = Upload(RandomF32(rng, kHeads * kHd));
  auto* dpanels = Upload(panels);
  auto* dfirst = Upload(member_first);
  auto* dmem = Upload(members);
  auto* dseg_first = Upload(std::vector<int64_t>{0, n_c});
  auto* dseg_size = Upload(std::vector<int64_t>{kCtx});
  namespace dev = ::ckv::kernels::device;
  const int64_t max_out = dev::MaxPlannedBlocks(n_c, 1, 0, 16);
  const int64_t scratch_bytes = dev::SelectScratchBytes(n_c, 1);
  const int64_t out_bytes =
      256 + max_out * static_cast<int64_t>(sizeof(dev::PlannedBlock));
  float* scores = nullptr;
  char* scratch = nullptr;
  char* out = nullptr;
  Check(cudaMalloc(&scores, kHeads * n_c * 4), "malloc");
  Check(cudaMalloc(&scratch, kHeads * scratch_bytes), "malloc");
  Check(cudaMalloc(&out, kHeads * out_bytes), "malloc");
  auto at = [](const void* p) {
    return dev::DevPtr{reinterpret_cast<uintptr_t>(p)};
  };
  // One query head's select_blocks arguments, laid out as the planner's
  // (SelectViewOf maps them: device addresses as they are).
  auto args_of = [&](int h) {
    dev::SelectArgs a;
    a.scores = at(scores + h * n_c);
    a.n = n_c;
    a.seg_first = at(dseg_first);
    a.seg_size = at(dseg_size);
    a.n_segs = 1;
    a.member_first = at(dfirst);
    a.members = at(dmem);
    a.n_members = kCtx;
    a.budget = kBudget;
    a.page_size = 16;
    a.scratch = at(scratch + h * scratch_bytes);
    a.totals = at(out + h * out_bytes);
    a.out = a.totals + 256;
    a.max_out = max_out;
    return a;
  };
  auto view_of = [&](int h) {
    return dev::SelectViewOf(args_of(h), [](dev::DevPtr p, int64_t, bool) {
      return reinterpret_cast<void*>(static_cast<uintptr_t>(p.addr));
    });
  };
  // The same as the device planner launches it: one batch op each.
  std::vector<dev::threads::ScoreItem> score_items;
  std::vector<int64_t> base = {0};
  for (int g = 0; g < kKvHeads; ++g) {
    dev::threads::ScoreItem it;
    it.q_offset = g * group * kHd;
    it.score_offset = g * group * n_c;
    it.n_q = static_cast<int32_t>(group);
    it.n = static_cast<int32_t>(n_c);
    it.ld = static_cast<int32_t>(n_c);
    score_items.push_back(it);
    base.push_back(base.back() + group * n_c);
  }
  std::vector<dev::threads::SelectItem> select_items;
  for (int h = 0; h < kHeads; ++h)
    select_items.push_back(dev::ItemOf(args_of(h)));
  auto* d_score_items = Upload(score_items);
  auto* d_base = Upload(base);
  auto* d_select_items = Upload(select_items);
  ScoreBatch batch;
  batch.items = d_score_items;
  batch.thread_base = d_base;
  batch.n_items = kKvHeads;
  batch.dim = kHd;
  batch.q_pool = q;
  batch.q_elems = kHeads * kHd;
  batch.panel_pool = dpanels;
  batch.panel_elems = static_cast<int64_t>(panels.size());
  batch.score_pool = scores;
  batch.score_elems = kHeads * n_c;
  batch.total_threads = base.back();
  const double ms = TimeMs(s, 20, [&] {
    for (int g = 0; g < kKvHeads; ++g) {
      Check(ScoreClusters(q + g * group * kHd, static_cast<int>(group), dpanels,
                          n_c, kHd, scores + g * group * n_c, n_c, s),
            "score");
    }
    for (int h = 0; h < kHeads; ++h)
      Check(SelectBlocks(view_of(h), s), "select");
  });
  rows->push_back(
      {"select 32 heads, 2048 cl", ms, "score_clusters + select_blocks"});
  const double batched_ms = TimeMs(s, 20, [&] {
    Check(ScoreClustersBatch(batch, s), "score batch");
    Check(SelectBlocksBatch(d_select_items, kHeads, n_c, s), "select batch");
  });
  rows->push_back({"select 32 heads, 2048 cl, batched", batched_ms,
                   "score_clusters_batch + select_blocks_batch"});
  for (void* ptr :
       {static_cast<void*>(q), static_cast<void*>(dpanels),
        static_cast<void*>(dfirst), static_cast<void*>(dmem),
        static_cast<void*>(dseg_first), static_cast<void*>(dseg_size),
        static_cast<void*>(scores), static_cast<void*>(scratch),
        static_cast<void*>(out), static_cast<void*>(d_score_items),
        static_cast<void*>(d_base), static_cast<void*>(d_select_items)}) {
    cudaFree(ptr);
  }
}

int Main() {
  int count = 0;
  const int err = GetDeviceCount(&count);
  if (err != 0 || count == 0) {
    std::fprintf(stderr, "FATAL: no CUDA device: %s\n",
                 err != 0 ? ErrorString(err) : "count is 0");
    return 1;
  }
  DeviceInfo info;
  Check(static_cast<cudaError_t>(GetDeviceInfo(0, &info)), "device info");
  cudaStream_t s;
  Check(cudaStreamCreate(&s), "stream");
  std::mt19937 rng(42);
  std::vector<Row> rows;
  BenchDecode(s, rng, &rows);
  BenchPrefill(s, rng, &rows);
  BenchKMeans(s, rng, &rows);
  BenchSelect(s, rng, &rows);
  Check(cudaStreamDestroy(s), "stream");
  std::printf("\n%s (sm_%d%d, %d SMs)\n", info.name, info.compute_major,
              info.compute_minor, info.multiprocessors);
  std::printf("%-26s %10s  %s\n", "op", "ms", "note");
  for (const Row& r : rows) {
    std::printf("%-26s %10.4f  %s\n", r.name.c_str(), r.ms, r.note.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ckv::kernels::cuda

int main() { return ckv::kernels::cuda::Main(); }
