// Host-side checks of the CUDA launchers that need no device (issue 29:
// "launch-geometry and workspace-size helpers are unit-tested on the
// host"): the layouts the host and the kernels share (select_blocks'
// scratch through SelectViewOf, the k-means job result) are in bounds,
// aligned and disjoint; every launcher refuses out-of-range arguments with
// cudaErrorInvalidValue before it touches the device, and an empty launch
// succeeds without one. Runs in CI (no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/attention_spans.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/forward_ops.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/norm_rope_swiglu.h"
#include "kernels/cuda/selection_ops.h"
#include "kernels/device/op_launchers.h"
#include "kernels/device/op_tables.h"
#include "kernels/device/selection_phases.h"

namespace ckv::kernels::cuda {
namespace {

namespace dev = ::ckv::kernels::device;

struct Span {
  uintptr_t begin, end;  // [begin, end)
};

// Every span lies in [lo, hi), is aligned to `align` and overlaps no other.
void ExpectDisjointWithin(std::vector<Span> spans, uintptr_t lo, uintptr_t hi,
                          uintptr_t align) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_GE(spans[i].begin, lo) << i;
    EXPECT_LE(spans[i].end, hi) << i;
    EXPECT_EQ(spans[i].begin % align, 0u) << i;
    if (i > 0) {
      EXPECT_GE(spans[i].begin, spans[i - 1].end) << i;
    }
  }
}

// cuBLAS is opened when a GEMM context is made, not linked
// (cublas_loader.h): the toolkit's library and every entry point the GEMM
// calls are found, without a device.
TEST(LaunchChecksTest, CublasOpensWithEveryEntryPoint) {
  const CublasApi* api = Cublas();
  ASSERT_NE(api, nullptr) << LastCublasLoadError();
  EXPECT_NE(api->create, nullptr);
  EXPECT_NE(api->destroy, nullptr);
  EXPECT_NE(api->set_stream, nullptr);
  EXPECT_NE(api->set_workspace, nullptr);
  EXPECT_NE(api->gemm_ex, nullptr);
  EXPECT_EQ(Cublas(), api);  // loaded once
  EXPECT_EQ(LastCublasLoadError(), "");
}

TEST(LaunchChecksTest, SelectScratchLayoutFitsItsBytes) {
  for (int64_t n : {1, 7, 64, 2048, 100003}) {
    for (int32_t segs : {1, 3, 40}) {
      dev::SelectArgs a;
      a.n = n;
      a.n_segs = segs;
      a.scratch = dev::DevPtr{0x10000000};
      a.max_out = dev::MaxPlannedBlocks(n, segs, 64, 16);
      a.out = dev::DevPtr{0x80000000};
      a.totals = dev::DevPtr{0x90000000};
      std::vector<Span> seen;
      const dev::threads::SelectView v =
          dev::SelectViewOf(a, [&](dev::DevPtr p, int64_t bytes, bool write) {
            if (write && p.addr >= a.scratch.addr &&
                p.addr < a.scratch.addr + 0x10000000) {
              seen.push_back({p.addr, p.addr + static_cast<uintptr_t>(bytes)});
            }
            return reinterpret_cast<void*>(static_cast<uintptr_t>(p.addr));
          });
      ASSERT_EQ(seen.size(), 3u);  // avail, recent_begin, taken
      ExpectDisjointWithin(seen, a.scratch.addr,
                           a.scratch.addr + dev::SelectScratchBytes(n, segs),
                           8);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.avail), a.scratch.addr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.totals), a.totals.addr);
    }
  }
}

TEST(LaunchChecksTest, KMeansResultSectionsAreAlignedAndDisjoint) {
  for (int64_t n : {1, 100, 131072}) {
    for (int k : {1, 13, 1639}) {
      if (k > n) continue;
      for (int dim : {64, 128}) {
        const dev::KMeansLayout l = dev::KMeansResultLayout(n, k, dim);
        ExpectDisjointWithin(
            {{0, sizeof(dev::KMeansHeader)},
             {static_cast<uintptr_t>(l.centroids),
              static_cast<uintptr_t>(l.centroids + int64_t{k} * dim * 4)},
             {static_cast<uintptr_t>(l.assignment),
              static_cast<uintptr_t>(l.assignment + n * 4)},
             {static_cast<uintptr_t>(l.sizes),
              static_cast<uintptr_t>(l.sizes + int64_t{k} * 4)}},
            0, static_cast<uintptr_t>(l.bytes), 64);
      }
    }
  }
}

TEST(LaunchChecksTest, SpanAttentionGeometry) {
  SpanAttentionParams p;
  p.n_heads = 32;
  p.n_q = 8;
  const dim3 g = SpanAttentionGrid(p);
  EXPECT_EQ(g.x, 8u);  // query rows on x: no 65535 cap on a prefill chunk
  EXPECT_EQ(g.y, 32u);
  EXPECT_EQ(kSpanAttentionThreads % 32, 0);
  EXPECT_LE(kSpanAttentionThreads, 1024);
}

// The tensor-core path: taken only for a prefill launch (>= 16 rows, one
// head table, one split) over F16/BF16 rows whose head_dim WMMA tiles.
TEST(LaunchChecksTest, AttentionTilesTakeOnlyWhatTheyCover) {
  SpanAttentionParams p;
  p.n_q = 300;
  p.n_heads = 32;
  p.head_dim = 128;
  p.kv_dtype = static_cast<int32_t>(DType::kF16);
  EXPECT_TRUE(UsesAttentionTiles(p));
  p.kv_dtype = static_cast<int32_t>(DType::kBF16);
  EXPECT_TRUE(UsesAttentionTiles(p));
  const auto without = [&p](auto change) {
    SpanAttentionParams q = p;
    change(q);
    return UsesAttentionTiles(q);
  };
  EXPECT_FALSE(without([](auto& q) { q.kv_dtype = -1; }));  // mixed spans
  EXPECT_FALSE(
      without([](auto& q) { q.kv_dtype = static_cast<int32_t>(DType::kF32); }));
  EXPECT_FALSE(without([](auto& q) { q.tiles = false; }));
  EXPECT_FALSE(without([](auto& q) { q.row_heads = true; }));  // a batch
  EXPECT_FALSE(without([](auto& q) { q.splits = 2; }));
  EXPECT_FALSE(without([](auto& q) { q.n_q = kMinTileQueries - 1; }));
  EXPECT_TRUE(without([](auto& q) { q.n_q = kMinTileQueries; }));
  for (int hd : {8, 67, 72, 264}) {
    EXPECT_FALSE(without([hd](auto& q) { q.head_dim = hd; })) << hd;
  }
  for (int hd : {16, 64, 80, 96, 256}) {
    EXPECT_TRUE(without([hd](auto& q) { q.head_dim = hd; })) << hd;
  }
  const dim3 g = AttentionTileGrid(p);
  EXPECT_EQ(g.x, 5u);  // ceil(300 / 64)
  EXPECT_EQ(g.y, 32u);
  EXPECT_EQ(kTileThreads, 32 * kTileQueries / 16);  // 16 rows per warp
  // Refused when asked directly for what it does not cover, before any
  // CUDA call.
  p.kv_dtype = -1;
  EXPECT_EQ(TileAttention(p, nullptr), cudaErrorInvalidValue);
}

// The tile kernel's shared memory: regions 128-byte aligned, disjoint, in
// bounds; WMMA's leading dimensions (multiples of 8 16-bit or 4 F32
// elements) and 32-byte fragment pointers (every 16th row); head_dim 256
// within an H100/H200 block's 227 KiB.
TEST(LaunchChecksTest, AttentionTileLayoutFitsWmmaAndTheBlock) {
  for (int hd = 16; hd <= 256; hd += 16) {
    const TileLayout t = MakeTileLayout(hd);
    EXPECT_EQ(t.ldh % 8, 0);
    EXPECT_EQ(t.ldp % 8, 0);
    EXPECT_EQ(t.ldo % 4, 0);
    EXPECT_EQ(t.lds % 4, 0);
    EXPECT_EQ(16 * t.ldh * 2 % 32, 0);
    EXPECT_EQ(16 * t.ldp * 2 % 32, 0);
    EXPECT_EQ(16 * t.ldo * 4 % 32, 0);
    EXPECT_EQ(16 * t.lds * 4 % 32, 0);
    EXPECT_GE(t.ldh, hd);
    EXPECT_GE(t.ldo, hd);
    const std::pair<size_t, size_t> regions[] = {
        {t.o, 4 * kTileQueries * t.ldo},
        {t.q_hi, 2 * kTileQueries * t.ldh},
        {t.q_lo, 2 * kTileQueries * t.ldh},
        {t.k, 2 * kTileKeys * t.ldh},
        {t.v, 2 * kTileKeys * t.ldh},
        {t.s, 4 * kTileQueries * t.lds},
        {t.p_hi, 2 * kTileQueries * t.ldp},
        {t.p_lo, 2 * kTileQueries * t.ldp},
        {t.m, 4 * kTileQueries},
        {t.l, 4 * kTileQueries},
        {t.keep, 4 * kTileQueries},
        {t.q_pos, 8 * kTileQueries},
        {t.k_pos, 8 * kTileKeys},
        {t.k_row, 8 * kTileKeys},
        {t.flag, 4}};
    std::vector<std::pair<size_t, size_t>> sorted(std::begin(regions),
                                                  std::end(regions));
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      EXPECT_EQ(sorted[i].first % 128, 0u) << hd << " region " << i;
      const size_t end = sorted[i].first + sorted[i].second;
      EXPECT_LE(end, i + 1 < sorted.size() ? sorted[i + 1].first : t.bytes)
          << hd << " region " << i;
    }
    EXPECT_LE(t.bytes, size_t{227} * 1024) << hd;
  }
}

// Split-K: none for short rows; for one query of 32 heads over 32k rows
// enough splits to fill a large GPU; never more than 64 or chunks < 256.
TEST(LaunchChecksTest, AttentionSplitsAndWorkspace) {
  EXPECT_EQ(dev::AttentionSplits(1, 32, 300), 1);
  EXPECT_EQ(dev::AttentionSplits(4096, 32, 32768), 1);  // a prefill chunk
  const int s = dev::AttentionSplits(1, 32, 32768);
  EXPECT_GE(int64_t{s} * 32, 528);
  EXPECT_LE(s, 64);
  for (int64_t rows : {512, 1000, 5000, 131072}) {
    const int k = dev::AttentionSplits(1, 8, rows);
    EXPECT_GE(rows / k, 256) << rows;
    EXPECT_LE(k, 64);
  }
  EXPECT_EQ(dev::AttentionWorkspaceBytes(1, 32, 128, 1), 0);
  EXPECT_EQ(dev::AttentionWorkspaceBytes(2, 32, 128, 17),
            int64_t{17} * 2 * 32 * 130 * 4);
}

// Refusals happen before any CUDA call: they hold on a machine without a
// driver, and so do empty launches.
TEST(LaunchChecksTest, LaunchersRefuseBadArgumentsWithoutADevice) {
  cudaStream_t s = nullptr;
  SpanAttentionParams p;
  p.n_heads = 4;
  p.head_dim = 64;
  p.n_q = 1;
  p.n_heads = 65536;  // gridDim.y limit
  EXPECT_EQ(SpanAttention(p, s), cudaErrorInvalidValue);
  p.n_heads = 4;
  p.n_q = -1;
  EXPECT_EQ(SpanAttention(p, s), cudaErrorInvalidValue);
  p.n_q = 0;
  EXPECT_EQ(SpanAttention(p, s), cudaSuccess);
  p.n_q = 1;
  p.splits = 4;  // no workspace
  EXPECT_EQ(SpanAttention(p, s), cudaErrorInvalidValue);
  p.splits = 0;
  EXPECT_EQ(SpanAttention(p, s), cudaErrorInvalidValue);
  p.splits = 1;
  // Streamed attention's finish: state and out needed, n within the grid.
  EXPECT_EQ(SpanAttentionFinish(nullptr, 3, 64, nullptr, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(SpanAttentionFinish(nullptr, -1, 64, nullptr, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(SpanAttentionFinish(nullptr, 0, 64, nullptr, s), cudaSuccess);
  EXPECT_EQ(ScoreClusters(nullptr, 1, nullptr, 10, 64, nullptr, 9, s),
            cudaErrorInvalidValue);  // ld < n
  EXPECT_EQ(ScoreClusters(nullptr, 0, nullptr, 10, 64, nullptr, 10, s),
            cudaSuccess);
  dev::threads::SelectView v;
  v.page_size = 0;
  EXPECT_EQ(SelectBlocks(v, s), cudaErrorInvalidValue);
  EXPECT_EQ(SelectBlocksBatch(nullptr, -1, 8, s), cudaErrorInvalidValue);
  EXPECT_EQ(SelectBlocksBatch(nullptr, 0, 8, s), cudaSuccess);
  EXPECT_EQ(SoftCap(nullptr, 8, 0.0f, s), cudaErrorInvalidValue);
  EXPECT_EQ(SoftCap(nullptr, 0, 30.0f, s), cudaSuccess);
  EXPECT_EQ(AddBias(nullptr, nullptr, 3, 0, s), cudaErrorInvalidValue);
  EXPECT_EQ(Add(nullptr, nullptr, -1, s), cudaErrorInvalidValue);
  EXPECT_EQ(Add(nullptr, nullptr, 0, s), cudaSuccess);
  EXPECT_EQ(ScatterItems(nullptr, nullptr, -1, s), cudaErrorInvalidValue);
  EXPECT_EQ(ScatterItems(nullptr, nullptr, 0, s), cudaSuccess);
  EXPECT_EQ(RmsNormPicked(nullptr, nullptr, nullptr, 2, 64, 1e-5f, nullptr, s),
            cudaErrorInvalidValue);  // no picked rows
  EXPECT_EQ(EmbeddingGather(DType::kF16, nullptr, 10, 64, nullptr, 2, 1.0f, 32,
                            nullptr, s),
            cudaErrorInvalidValue);  // out_stride < dim
  RopeConfig rc;
  rc.rot_dims = 66;  // > head_dim
  EXPECT_EQ(Rope(nullptr, 1, 1, 64, nullptr, rc, s), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ckv::kernels::cuda
