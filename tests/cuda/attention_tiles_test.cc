// The tensor-core prefill attention (kernels/cuda/attention_tiles.h)
// against ref::Attention on what a launch can name: a contiguous span and
// a row-listed span with explicit positions and a device range, rows at a
// 16-byte-aligned base and at an unaligned one, F16 and BF16, head dims 48
// to 256, causal masking inside the key tiles, soft-capping and a window,
// the output and the streamed state (then SpanAttentionFinish). The span
// kernel (tiles off) runs the same launches as a second witness. Without a
// device every test reports SKIPPED.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/attention_tiles.h"
#include "kernels/dtype.h"
#include "kernels/ref/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cuda {
namespace {

namespace dev = ::ckv::kernels::device;
using cpu::testing::RandomFloats;
using testing::CudaTest;
using testing::DeviceArray;
using testing::MaxAbs;

// The op suite's tolerance for the tiles (tests/ops/backend_ops_fixture.h
// kTileAttentionTolerance, its bound there): |q| <= 2, |k|, |v| <= 1.
constexpr double kTolerance = 1e-4;
constexpr int kHeads = 6, kKvHeads = 2, kRows = 300, kQueries = 77;
constexpr int64_t kFirstQueryPos = 200;

uint16_t To16(DType t, float f) {
  return t == DType::kF16 ? F32ToF16(f) : F32ToBF16(f);
}
float From16(DType t, uint16_t h) {
  return t == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
}

class TileAttentionTest : public CudaTest {
 protected:
  std::mt19937 rng_{29};
};

// Query head h attends two spans of its KV head g: rows [0, 100) at
// positions 0.. (no lists), then a list of 130 distinct rows of [100, 300)
// (ascending, positions = rows) of which the device range {5, 100} picks
// entries 5..104. Queries at positions 200..276: the listed rows past a
// query's position are masked inside the tiles.
TEST_F(TileAttentionTest, MatchesTheReferenceOnListsRangesAndBases) {
  for (const DType t : {DType::kF16, DType::kBF16}) {
    for (const int hd : {48, 128, 256}) {
      for (const int misalign : {0, 8}) {  // bytes before the rows
        SCOPED_TRACE(::testing::Message() << DTypeName(t) << " hd " << hd
                                          << " misalign " << misalign);
        const int64_t row_elems = int64_t{kKvHeads} * kRows * hd;
        std::vector<float> kf = RandomFloats(rng_, row_elems);
        std::vector<float> vf = RandomFloats(rng_, row_elems);
        // Device bytes: `misalign` bytes, then the 16-bit rows.
        const int pad = misalign / 2;
        std::vector<uint16_t> kh(pad + row_elems), vh(pad + row_elems);
        for (int64_t i = 0; i < row_elems; ++i) {
          kh[pad + i] = To16(t, kf[i]);
          vh[pad + i] = To16(t, vf[i]);
          kf[i] = From16(t, kh[pad + i]);
          vf[i] = From16(t, vh[pad + i]);
        }
        std::vector<int32_t> all(kRows - 100);
        std::iota(all.begin(), all.end(), 100);
        std::shuffle(all.begin(), all.end(), rng_);
        std::vector<int32_t> list(all.begin(), all.begin() + 130);
        std::sort(list.begin(), list.end());
        std::vector<int64_t> list_pos(list.begin(), list.end());
        const std::vector<int64_t> range = {5, 100};
        const std::vector<float> q =
            RandomFloats(rng_, int64_t{kQueries} * kHeads * hd, -2.0f, 2.0f);
        std::vector<int64_t> q_pos(kQueries);
        std::iota(q_pos.begin(), q_pos.end(), kFirstQueryPos);

        DeviceArray<uint16_t> dk(kh), dv(vh);
        DeviceArray<int32_t> dlist(list);
        DeviceArray<int64_t> dlist_pos(list_pos), drange(range);
        DeviceArray<float> dq(q);
        DeviceArray<int64_t> dq_pos(q_pos);
        const uint64_t k0 = reinterpret_cast<uintptr_t>(dk.get()) + misalign;
        const uint64_t v0 = reinterpret_cast<uintptr_t>(dv.get()) + misalign;
        const int64_t head_bytes = int64_t{kRows} * hd * 2;
        std::vector<dev::AttnSpanDesc> spans;
        std::vector<int32_t> heads;
        for (int h = 0; h < kHeads; ++h) {
          const int g = h / (kHeads / kKvHeads);
          dev::AttnSpanDesc a;
          a.k = k0 + g * head_bytes;
          a.v = v0 + g * head_bytes;
          a.bytes = 100 * hd * 2;
          a.count = 100;
          a.dtype = static_cast<int32_t>(t);
          dev::AttnSpanDesc b = a;
          b.bytes = head_bytes;
          b.count = static_cast<int64_t>(list.size());
          b.rows = reinterpret_cast<uintptr_t>(dlist.get());
          b.positions = reinterpret_cast<uintptr_t>(dlist_pos.get());
          b.range_at = reinterpret_cast<uintptr_t>(drange.get());
          heads.push_back(static_cast<int32_t>(spans.size()));
          heads.push_back(2);
          spans.push_back(a);
          spans.push_back(b);
        }
        DeviceArray<dev::AttnSpanDesc> dspans(spans);
        DeviceArray<int32_t> dheads(heads);

        // The reference over the same rows (F32 copies of the stored
        // values): per head the contiguous run and the listed entries.
        std::vector<KvSpan> ref_spans(2 * kHeads);
        std::vector<KvSpanList> lists(kHeads);
        for (int h = 0; h < kHeads; ++h) {
          const int g = h / (kHeads / kKvHeads);
          const float* kg = kf.data() + int64_t{g} * kRows * hd;
          const float* vg = vf.data() + int64_t{g} * kRows * hd;
          ref_spans[2 * h] = {kg, vg, DType::kF32, hd, 100, 0};
          KvSpan& b = ref_spans[2 * h + 1];
          b = {kg, vg, DType::kF32, hd, range[1], 0};
          b.rows = list.data() + range[0];
          b.positions = list_pos.data() + range[0];
          lists[h] = {&ref_spans[2 * h], 2};
        }
        for (const auto& [softcap, window] :
             {std::pair<float, int64_t>{0.0f, 0}, {20.0f, 90}}) {
          std::vector<float> want(q.size());
          AttentionArgs r;
          r.q = q.data();
          r.q_pos = q_pos.data();
          r.n_q = kQueries;
          r.n_heads = kHeads;
          r.head_dim = hd;
          r.scale = 1.0f / std::sqrt(static_cast<float>(hd));
          r.kv = lists.data();
          r.out = want.data();
          r.softcap = softcap;
          r.window = window;
          ref::Attention(r);

          SpanAttentionParams p;
          p.q = dq.get();
          p.q_pos = dq_pos.get();
          p.spans = dspans.get();
          p.heads = dheads.get();
          p.n_q = kQueries;
          p.n_heads = kHeads;
          p.head_dim = hd;
          p.scale = r.scale;
          p.softcap = softcap;
          p.window = window;
          p.kv_dtype = static_cast<int32_t>(t);
          ASSERT_TRUE(UsesAttentionTiles(p));
          for (const bool tiles : {true, false}) {
            p.tiles = tiles;
            DeviceArray<float> out(q.size());
            p.out = out.get();
            CUDA_ASSERT_OK(SpanAttention(p, stream_));
            EXPECT_LT(MaxAbs(out.Download(), want), kTolerance)
                << (tiles ? "tiles" : "span kernel") << " softcap " << softcap
                << " window " << window;
          }
          // Streamed: the whole launch folded into a fresh state, then
          // finished.
          p.tiles = true;
          DeviceArray<float> state(int64_t{kQueries} * kHeads * (hd + 2));
          DeviceArray<float> out(q.size());
          p.out = nullptr;
          p.state = state.get();
          p.fresh = true;
          CUDA_ASSERT_OK(SpanAttention(p, stream_));
          CUDA_ASSERT_OK(SpanAttentionFinish(
              state.get(), int64_t{kQueries} * kHeads, hd, out.get(), stream_));
          EXPECT_LT(MaxAbs(out.Download(), want), kTolerance)
              << "streamed, softcap " << softcap << " window " << window;
          p.state = nullptr;
          p.fresh = false;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ckv::kernels::cuda
