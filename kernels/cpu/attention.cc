// Flash-style attention driver. Query heads that attend the same span list
// (a GQA group) are processed together, so each key/value tile is converted
// once for all of them. A work item is (group, query tile, key split): its
// rows are (query, head) pairs; it streams kTileK-row key tiles through
// Q.K^T -> masked online softmax -> P.V without an n_q x n_ctx matrix. Items
// are pulled from an atomic counter (heaviest first). When there are too few
// items for the threads (decode), keys are split and partial results
// (m, l, O) are merged afterwards.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"

namespace ckv::kernels::cpu {
namespace {

constexpr int kMaxRows = 64;  // rows (query x head) per item
constexpr int64_t kMinSplitKeys = 512;
// Items with at most this many rows score keys from a row-major tile
// (qk_rowmajor, no transpose) where the kernel table has it.
constexpr int kRowMajorMaxRows = 8;
// Items with at most this many rows read K and V rows straight from storage
// (qk_direct / pv_direct) where the kernel table has them.
constexpr int kDirectMaxRows = 4;

bool SameSpans(const KvSpanList& a, const KvSpanList& b) {
  if (a.count != b.count) return false;
  for (int i = 0; i < a.count; ++i) {
    const KvSpan &x = a.spans[i], &y = b.spans[i];
    if (x.k != y.k || x.v != y.v || x.dtype != y.dtype ||
        x.stride != y.stride || x.count != y.count ||
        x.first_pos != y.first_pos || x.positions != y.positions ||
        x.rows != y.rows || x.row_positions != y.row_positions) {
      return false;
    }
  }
  return true;
}

struct Group {
  std::vector<int> heads;
  const KvSpanList* kv = nullptr;
  int64_t n_keys = 0;
  int q_per_tile = 1;
  int q_tiles = 0;
  int splits = 1;
};

struct Item {
  int group, q_tile, split;
  int64_t key_begin, key_end;  // in the concatenation of the group's spans
  int64_t partial = -1;        // slot in the partial buffer, -1 = final
};

// Per-thread scratch, reused across calls.
struct Scratch {
  std::vector<float> kt, vt, s, q, o, m, l, alpha, zeros;
  std::vector<int64_t> qpos, kpos;
  std::vector<uint32_t> q2, kt2, vt2;  // BF16 pairs (bf16 tile forms)
};

// Items with more rows than this take the BF16 tile forms where the kernel
// table has them (the avx512_bf16 table: prefill only, decode stays exact).
bool UsesBf16Tiles(const KernelSet& ks, int rows) {
  return ks.qk_bf16 != nullptr && rows > kRowMajorMaxRows;
}

struct Plan {
  const AttentionArgs* a;
  const KernelSet* ks;
  std::vector<Group> groups;
  std::vector<Item> items;
  int ldv;                     // head_dim rounded up to 16
  std::vector<float> partial;  // per slot: kMaxRows x (ldv + 2)
};

std::vector<Group> MakeGroups(const AttentionArgs& a) {
  std::vector<Group> groups;
  std::vector<bool> done(a.n_heads, false);
  for (int h = 0; h < a.n_heads; ++h) {
    if (done[h]) continue;
    Group g;
    g.kv = &a.kv[h];
    for (int h2 = h; h2 < a.n_heads; ++h2) {
      if (!done[h2] && SameSpans(a.kv[h], a.kv[h2])) {
        g.heads.push_back(h2);
        done[h2] = true;
      }
      if (static_cast<int>(g.heads.size()) == kMaxRows) break;
    }
    for (int s = 0; s < g.kv->count; ++s) g.n_keys += g.kv->spans[s].count;
    const int gs = static_cast<int>(g.heads.size());
    g.q_per_tile = std::max(1, kMaxRows / gs);
    g.q_tiles = (a.n_q + g.q_per_tile - 1) / g.q_per_tile;
    groups.push_back(std::move(g));
  }
  return groups;
}

void MakeItems(Plan& plan, int n_threads) {
  int64_t base = 0;
  for (const Group& g : plan.groups) base += g.q_tiles;
  const int64_t want = n_threads > 1 ? 4 * n_threads : 1;
  int64_t slots = 0;
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    Group& g = plan.groups[gi];
    const int64_t by_work = (want + base - 1) / std::max<int64_t>(1, base);
    const int64_t by_keys = std::max<int64_t>(1, g.n_keys / kMinSplitKeys);
    g.splits = static_cast<int>(std::clamp<int64_t>(by_work, 1, by_keys));
    // Key ranges rounded to whole tiles.
    const int64_t per = (g.n_keys + g.splits - 1) / g.splits;
    const int64_t step = (per + kTileK - 1) / kTileK * kTileK;
    for (int qt = g.q_tiles - 1; qt >= 0; --qt) {  // later queries: heavier
      for (int s = 0; s < g.splits; ++s) {
        Item it{gi,
                qt,
                s,
                std::min(g.n_keys, s * step),
                std::min(g.n_keys, (s + 1) * step),
                -1};
        if (g.splits > 1) it.partial = slots++;
        plan.items.push_back(it);
      }
    }
  }
  plan.partial.resize(slots * kMaxRows * (plan.ldv + 2));
}

// Fills rows of the item: scaled queries (stride ldv, zero-padded) and
// positions.
int LoadQueries(const Plan& plan, const Item& it, Scratch& sc) {
  const AttentionArgs& a = *plan.a;
  const Group& g = plan.groups[it.group];
  const int gs = static_cast<int>(g.heads.size());
  const int q0 = it.q_tile * g.q_per_tile;
  const int nq = std::min(g.q_per_tile, a.n_q - q0);
  const int rows = nq * gs;
  sc.q.assign(size_t{1} * rows * plan.ldv, 0.0f);
  sc.qpos.resize(rows);
  for (int r = 0; r < rows; ++r) {
    const int t = q0 + r / gs, h = g.heads[r % gs];
    const float* src = a.q + (int64_t{t} * a.n_heads + h) * a.head_dim;
    for (int d = 0; d < a.head_dim; ++d) {
      sc.q[r * plan.ldv + d] = src[d] * a.scale;
    }
    sc.qpos[r] = a.q_pos[t];
  }
  if (UsesBf16Tiles(*plan.ks, rows)) {
    const int ldq2 = plan.ldv / 2;
    sc.q2.resize(size_t{1} * rows * ldq2);
    for (int r = 0; r < rows; ++r) {
      plan.ks->to_pairs_bf16(&sc.q[r * plan.ldv], plan.ldv, &sc.q2[r * ldq2]);
    }
    sc.zeros.assign(std::max(plan.ldv, kTileK), 0.0f);
  }
  return rows;
}

// Q.K^T of a tile on BF16 pairs: the F32 tile of load_kt paired over d.
void QkBf16Tile(const Plan& plan, DType t, const char* k, int64_t stride,
                const int32_t* idx, int n, int rows, Scratch& sc) {
  const KernelSet& ks = *plan.ks;
  const int hd = plan.a->head_dim, n_pairs = (hd + 1) / 2;
  ks.load_kt(t, k, stride, idx, n, hd, sc.kt.data());
  sc.kt2.resize(size_t{1} * n_pairs * kTileK);
  for (int p = 0; p < n_pairs; ++p) {
    const float* odd =
        2 * p + 1 < hd ? &sc.kt[(2 * p + 1) * kTileK] : sc.zeros.data();
    ks.pair_rows_bf16(&sc.kt[2 * p * kTileK], odd, kTileK, &sc.kt2[p * kTileK]);
  }
  ks.qk_bf16(sc.q2.data(), plan.ldv / 2, rows, sc.kt2.data(), n_pairs,
             sc.s.data());
}

// P.V of a tile on BF16 pairs: the F32 tile of load_v paired over keys.
void PvBf16Tile(const Plan& plan, DType t, const char* v, int64_t stride,
                const int32_t* idx, int n, int rows, Scratch& sc) {
  const KernelSet& ks = *plan.ks;
  const int ldv = plan.ldv, n_pairs = (n + 1) / 2;
  ks.load_v(t, v, stride, idx, n, plan.a->head_dim, ldv, sc.vt.data());
  sc.vt2.resize(size_t{1} * (kTileK / 2) * ldv);
  for (int p = 0; p < n_pairs; ++p) {
    const float* odd =
        2 * p + 1 < n ? &sc.vt[(2 * p + 1) * ldv] : sc.zeros.data();
    ks.pair_rows_bf16(&sc.vt[2 * p * ldv], odd, ldv, &sc.vt2[p * ldv]);
  }
  ks.pv_bf16(sc.s.data(), rows, sc.vt2.data(), n, ldv, sc.alpha.data(),
             sc.o.data());
}

// Bit j set when key j is visible to a query at qpos: causal, and within
// the sliding window when window > 0.
uint64_t ValidMask(const int64_t* kpos, int n, int64_t kmin, int64_t kmax,
                   int64_t qpos, int64_t window) {
  const uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
  const bool windowed = window > 0;
  if (kmax <= qpos && (!windowed || qpos - kmin < window)) return all;
  if (kmin > qpos || (windowed && qpos - kmax >= window)) return 0;
  uint64_t m = 0;
  for (int j = 0; j < n; ++j) {
    const bool visible =
        kpos[j] <= qpos && (!windowed || qpos - kpos[j] < window);
    m |= uint64_t{visible} << j;
  }
  return m;
}

// s = cap * tanh(s / cap) on the first n scores of each of `rows` rows.
void SoftCapTile(float* s, int rows, int n, float cap) {
  const float inv = 1.0f / cap;
  for (int i = 0; i < rows; ++i) {
    float* row = s + i * kTileK;
    for (int j = 0; j < n; ++j) row[j] = cap * std::tanh(row[j] * inv);
  }
}

// Prefetches rows [j0, j1) of the span's K and V (the next tile), so that
// their memory latency overlaps the current tile's compute.
void PrefetchRows(const KvSpan& sp, int64_t j0, int64_t j1, int hd) {
  const int64_t row_bytes = RowBytes(sp.dtype, sp.stride);
  const int64_t used = RowBytes(sp.dtype, hd);
  // Consecutive rows of under 256 bytes are left to the hardware
  // prefetcher: on an AVX-512 Xeon, prefetching them made 8/2-head, head-
  // dim-64 F16 decode 18 % slower, while 128-dim rows and index lists gain
  // 35-55 % from it (kernels_bench attn decode / sparse decode).
  if (sp.rows == nullptr && used < 256) return;
  for (int64_t r = j0; r < j1; ++r) {
    const int64_t i = sp.rows ? sp.rows[r] : r;
    const char* k = static_cast<const char*>(sp.k) + i * row_bytes;
    const char* v = static_cast<const char*>(sp.v) + i * row_bytes;
    for (int64_t off = 0; off < used; off += 64) {
      __builtin_prefetch(k + off);
      __builtin_prefetch(v + off);
    }
  }
}

// One key tile (span rows [j0, j0 + n)) against the item's rows. With an
// index list the loaders gather the stored rows sp.rows[j0 + j].
void ProcessTile(const Plan& plan, const KvSpan& sp, int64_t j0, int n,
                 int rows, int64_t min_qpos, int64_t max_qpos, Scratch& sc) {
  const AttentionArgs& a = *plan.a;
  const KernelSet& ks = *plan.ks;
  int64_t kmin = INT64_MAX, kmax = INT64_MIN;
  for (int j = 0; j < n; ++j) {
    const int64_t r = j0 + j;
    sc.kpos[j] = SpanRowPosition(sp, r);
    kmin = std::min(kmin, sc.kpos[j]);
    kmax = std::max(kmax, sc.kpos[j]);
  }
  if (kmin > max_qpos) return;  // entirely in every row's future
  if (a.window > 0 && min_qpos - kmax >= a.window) return;  // behind windows
  const int32_t* idx = sp.rows ? sp.rows + j0 : nullptr;
  const int64_t off = idx ? 0 : RowBytes(sp.dtype, sp.stride) * j0;
  const char* k = static_cast<const char*>(sp.k) + off;
  const char* v = static_cast<const char*>(sp.v) + off;
  const bool direct =
      ks.qk_direct != nullptr && rows <= kDirectMaxRows && a.head_dim % 8 == 0;
  const bool bf16 = UsesBf16Tiles(ks, rows);
  if (bf16) {
    QkBf16Tile(plan, sp.dtype, k, sp.stride, idx, n, rows, sc);
  } else if (direct) {
    ks.qk_direct(sp.dtype, k, sp.stride, idx, n, a.head_dim, sc.q.data(),
                 plan.ldv, rows, sc.s.data());
  } else if (ks.qk_rowmajor != nullptr && rows <= kRowMajorMaxRows) {
    ks.load_v(sp.dtype, k, sp.stride, idx, n, a.head_dim, plan.ldv,
              sc.kt.data());
    ks.qk_rowmajor(sc.q.data(), plan.ldv, rows, sc.kt.data(), plan.ldv, n,
                   sc.s.data());
  } else {
    ks.load_kt(sp.dtype, k, sp.stride, idx, n, a.head_dim, sc.kt.data());
    ks.qk(sc.q.data(), plan.ldv, rows, sc.kt.data(), a.head_dim, sc.s.data());
  }
  if (a.softcap > 0.0f) SoftCapTile(sc.s.data(), rows, n, a.softcap);
  for (int i = 0; i < rows; ++i) {
    const uint64_t valid =
        ValidMask(sc.kpos.data(), n, kmin, kmax, sc.qpos[i], a.window);
    sc.alpha[i] =
        ks.softmax_row(sc.s.data() + i * kTileK, valid, &sc.m[i], &sc.l[i]);
  }
  if (bf16) {
    PvBf16Tile(plan, sp.dtype, v, sp.stride, idx, n, rows, sc);
    return;
  }
  if (direct) {
    ks.pv_direct(sp.dtype, v, sp.stride, idx, n, a.head_dim, sc.s.data(), rows,
                 sc.alpha.data(), sc.o.data(), plan.ldv);
    return;
  }
  ks.load_v(sp.dtype, v, sp.stride, idx, n, a.head_dim, plan.ldv, sc.vt.data());
  ks.pv(sc.s.data(), rows, sc.vt.data(), n, plan.ldv, sc.alpha.data(),
        sc.o.data());
}

// A key tile: rows [j0, j0 + n) of span `sp`.
struct TileRef {
  const KvSpan* sp = nullptr;
  int64_t j0 = 0;
  int n = 0;
};

// Streams the item's key range [key_begin, key_end) tile by tile,
// prefetching each next tile (also across spans: zero-copy selections are
// many short index-list spans) while the current one is computed.
void StreamKeys(const Plan& plan, const Item& it, int rows, Scratch& sc) {
  const KvSpanList& list = *plan.groups[it.group].kv;
  const auto [min_it, max_it] =
      std::minmax_element(sc.qpos.begin(), sc.qpos.end());
  const int64_t min_qpos = *min_it, max_qpos = *max_it;
  TileRef pending;  // the tile to compute once the next one is known
  int64_t base = 0;
  for (int si = 0; si < list.count; ++si) {
    const KvSpan& sp = list.spans[si];
    const int64_t lo = std::max<int64_t>(it.key_begin - base, 0);
    const int64_t hi = std::min<int64_t>(it.key_end - base, sp.count);
    for (int64_t j0 = lo; j0 < hi; j0 += kTileK) {
      const int n = static_cast<int>(std::min<int64_t>(kTileK, hi - j0));
      PrefetchRows(sp, j0, j0 + n, plan.a->head_dim);
      if (pending.sp != nullptr) {
        ProcessTile(plan, *pending.sp, pending.j0, pending.n, rows, min_qpos,
                    max_qpos, sc);
      }
      pending = {&sp, j0, n};
    }
    base += sp.count;
  }
  if (pending.sp != nullptr) {
    ProcessTile(plan, *pending.sp, pending.j0, pending.n, rows, min_qpos,
                max_qpos, sc);
  }
}

void WriteResult(Plan& plan, const Item& it, int rows, const Scratch& sc) {
  const AttentionArgs& a = *plan.a;
  const Group& g = plan.groups[it.group];
  const int gs = static_cast<int>(g.heads.size());
  const int q0 = it.q_tile * g.q_per_tile;
  if (it.partial >= 0) {
    float* dst = plan.partial.data() + it.partial * kMaxRows * (plan.ldv + 2);
    for (int r = 0; r < rows; ++r) {
      float* row = dst + r * (plan.ldv + 2);
      row[0] = sc.m[r];
      row[1] = sc.l[r];
      std::memcpy(row + 2, sc.o.data() + r * plan.ldv, plan.ldv * 4);
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const int t = q0 + r / gs, h = g.heads[r % gs];
    float* out = a.out + (int64_t{t} * a.n_heads + h) * a.head_dim;
    const float inv = sc.l[r] > 0.0f ? 1.0f / sc.l[r] : 0.0f;
    for (int d = 0; d < a.head_dim; ++d) {
      out[d] = sc.o[r * plan.ldv + d] * inv;
    }
  }
}

void ProcessItem(Plan& plan, const Item& it) {
  static thread_local Scratch sc;
  const int hd = plan.a->head_dim;
  const int rows = LoadQueries(plan, it, sc);
  sc.kt.resize(std::max(hd, plan.ldv) * kTileK);  // K, either layout
  sc.vt.resize(kTileK * plan.ldv);
  sc.s.resize(rows * kTileK);
  sc.o.assign(rows * plan.ldv, 0.0f);
  sc.m.assign(rows, -INFINITY);
  sc.l.assign(rows, 0.0f);
  sc.alpha.resize(rows);
  sc.kpos.resize(kTileK);
  StreamKeys(plan, it, rows, sc);
  WriteResult(plan, it, rows, sc);
}

// Combines the key splits of each (group, query tile) into the output.
void MergeSplits(Plan& plan) {
  const AttentionArgs& a = *plan.a;
  const int64_t slot_floats = kMaxRows * (plan.ldv + 2);
  size_t i = 0;
  while (i < plan.items.size()) {
    const Item& first = plan.items[i];
    const Group& g = plan.groups[first.group];
    if (first.partial < 0) {
      ++i;
      continue;
    }
    const int gs = static_cast<int>(g.heads.size());
    const int q0 = first.q_tile * g.q_per_tile;
    const int rows = std::min(g.q_per_tile, a.n_q - q0) * gs;
    for (int r = 0; r < rows; ++r) {
      float mx = -INFINITY;
      for (int s = 0; s < g.splits; ++s) {
        const int64_t slot = plan.items[i + s].partial;
        mx =
            std::max(mx, plan.partial[slot * slot_floats + r * (plan.ldv + 2)]);
      }
      const int t = q0 + r / gs, h = g.heads[r % gs];
      float* out = a.out + (int64_t{t} * a.n_heads + h) * a.head_dim;
      std::fill(out, out + a.head_dim, 0.0f);
      if (mx == -INFINITY) continue;  // no visible key in any split
      float l = 0.0f;
      for (int s = 0; s < g.splits; ++s) {
        const float* row = plan.partial.data() +
                           plan.items[i + s].partial * slot_floats +
                           r * (plan.ldv + 2);
        const float w = std::exp(row[0] - mx);
        l += w * row[1];
        for (int d = 0; d < a.head_dim; ++d) out[d] += w * row[2 + d];
      }
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int d = 0; d < a.head_dim; ++d) out[d] *= inv;
    }
    i += g.splits;
  }
}

}  // namespace

void Attention(ThreadPool* pool, const AttentionArgs& a) {
  if (a.n_q <= 0 || a.n_heads <= 0 || a.head_dim <= 0) return;
  Plan plan;
  plan.a = &a;
  plan.ks = &ActiveKernels();
  plan.ldv = (a.head_dim + 15) / 16 * 16;
  plan.groups = MakeGroups(a);
  const int n_threads = pool ? pool->size() : 1;
  MakeItems(plan, n_threads);
  std::atomic<int64_t> next{0};
  const int64_t n_items = static_cast<int64_t>(plan.items.size());
  auto worker = [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1)) < n_items;) {
      ProcessItem(plan, plan.items[i]);
    }
  };
  if (pool != nullptr && n_items > 1) {
    pool->ParallelFor(n_threads, 1, worker);
  } else {
    worker(0, 1);
  }
  MergeSplits(plan);
}

}  // namespace ckv::kernels::cpu
