// Tables the device backend writes into device-visible memory for an op to
// read (plain structs: included by host code and by kernels/cuda/*.cu).
#pragma once

#include <cstdint>

namespace ckv::kernels::device {

// One attended span of the attention op (kernels::KvSpan with device
// addresses): rows r < count of K and V at k/v + row * head_dim elements of
// `dtype`, row = rows ? rows[r] (int32) : r; position positions ?
// positions[r] (int64) : first_pos + row. `bytes`: the size of the K (and
// of the V) region the span may read. Addresses 0: none. range_at: the
// device address of int64 {first, n} written on the device (a planner's
// row lists); the span's rows are then r in [first, first + n) of the
// lists (rows and positions hold `count` entries; SpanRange clamps).
struct AttnSpanDesc {
  uint64_t k = 0, v = 0, rows = 0, positions = 0;
  int64_t bytes = 0;
  int64_t first_pos = 0;
  int64_t count = 0;
  int32_t dtype = 0;  // kernels::DType
  int32_t pad = 0;
  uint64_t range_at = 0;
};
static_assert(sizeof(AttnSpanDesc) == 72);

// The list entries [*first, *last) a span attends: [0, count) without
// range_at, else its {first, n} clamped into [0, count] (`range` is the
// mapped range_at; null without one).
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline void
    SpanRange(const AttnSpanDesc& d, const int64_t* range, int64_t* first,
              int64_t* last) {
  if (range == nullptr) {
    *first = 0;
    *last = d.count;
    return;
  }
  const int64_t f =
      range[0] < 0 ? 0 : (range[0] > d.count ? d.count : range[0]);
  const int64_t n = range[1] < 0 ? 0 : range[1];
  *first = f;
  *last = n > d.count - f ? d.count : f + n;
}

// One staged row of a scatter: `bytes` bytes at src + from go to `dst`.
struct ScatterItem {
  uint64_t dst = 0;
  int64_t from = 0;
  int64_t bytes = 0;
  int64_t pad = 0;
};
static_assert(sizeof(ScatterItem) == 32);

// One appended token of a KV cache (KvCache::AppendOnDevice): its K and V,
// F32 rows of n_kv * head_dim at row src_row of the step's k and v, are
// rounded to the cache's 16-bit type and written twice: into the cache's
// device rows (KV head h at k_dst + h * head_stride bytes; likewise v_dst)
// and into the host's copy (mapped pinned, heads contiguous: element
// h * head_dim + d at k_copy, likewise v_copy).
struct AppendItem {
  uint64_t k_dst = 0, v_dst = 0;
  uint64_t k_copy = 0, v_copy = 0;
  int64_t head_stride = 0;  // bytes
  int64_t src_row = 0;
};
static_assert(sizeof(AppendItem) == 48);

// HeadPlan's BlockRef on the device (model/kv/selection.h).
struct PlannedBlock {
  int32_t segment = 0;
  int32_t kind = 0;  // kPlannedCluster or kPlannedPage
  int32_t id = 0;    // cluster or page index within the segment
  int32_t begin = 0;
  int32_t count = 0;
};
static_assert(sizeof(PlannedBlock) == 20);
inline constexpr int32_t kPlannedCluster = 0;  // BlockKind::kCluster
inline constexpr int32_t kPlannedPage = 1;     // BlockKind::kPage

struct PlanTotals {
  int64_t blocks = 0;  // PlannedBlock entries written
  int64_t tokens = 0;  // sum of their counts
  int64_t recent_blocks = 0;
  int64_t recent_tokens = 0;
  int64_t budget = 0;  // min(budget, clustered rows)
};
static_assert(sizeof(PlanTotals) == 40);

// The result of one k-means job in device memory: this header, then
// centroids [k][dim] floats, assignment [n] and sizes [k] int32 at the
// requested k, each section 64-byte aligned; the header's k is the number
// of non-empty clusters (the first k of each array are valid).
struct KMeansHeader {
  int64_t k = 0, iterations = 0, key_scorings = 0;
};

struct KMeansLayout {
  int64_t centroids = 0, assignment = 0, sizes = 0, bytes = 0;
};

inline KMeansLayout KMeansResultLayout(int64_t n, int k, int dim) {
  auto up = [](int64_t b) { return (b + 63) / 64 * 64; };
  KMeansLayout l;
  l.centroids = up(static_cast<int64_t>(sizeof(KMeansHeader)));
  l.assignment = l.centroids + up(int64_t{k} * dim * 4);
  l.sizes = l.assignment + up(n * 4);
  l.bytes = l.sizes + up(int64_t{k} * 4);
  return l;
}

}  // namespace ckv::kernels::device
