// Every CUDA op of kernels/cuda against its reference (kernels/ref,
// ref::), on random inputs with odd sizes, per dtype, in the manner of
// ggml's test-backend-ops. Cluster ops: cluster_ops_test.cc. Without a
// device every test reports SKIPPED. Each tolerance states its reason.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm_rope_swiglu.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cuda {
namespace {

namespace ref = ::ckv::kernels::ref;
using cpu::testing::Encode;
using cpu::testing::RandomFloats;
using testing::CudaTest;
using testing::DeviceArray;
using testing::MaxAbs;
using testing::RelL2;

class CudaOpsTest : public CudaTest {
 protected:
  std::mt19937 rng_{1234};
};

TEST_F(CudaOpsTest, RmsNormMatchesReference) {
  for (const int64_t n : {1, 33, 1001, 4096}) {
    const int64_t rows = 7;
    const auto x = RandomFloats(rng_, rows * n, -3.0f, 3.0f);
    const auto w = RandomFloats(rng_, n);
    std::vector<float> want(rows * n);
    ref::RmsNorm(x.data(), w.data(), rows, n, 1e-5f, want.data());
    DeviceArray<float> dx(x), dw(w), dy(rows * n);
    CUDA_ASSERT_OK(RmsNorm(dx.get(), dw.get(), rows, n, 1e-5f, dy.get(),
                           stream_));
    // F32 sum of squares vs double: ~n * 2^-24 relative at worst.
    EXPECT_LT(RelL2(dy.Download(), want), 2e-6) << "n=" << n;
    CUDA_ASSERT_OK(RmsNorm(dx.get(), dw.get(), rows, n, 1e-5f, dx.get(),
                           stream_));  // in place
    EXPECT_LT(RelL2(dx.Download(), want), 2e-6) << "in place, n=" << n;
  }
}

TEST_F(CudaOpsTest, RopeMatchesReferenceBothModes) {
  const int64_t tokens = 9;
  const int heads = 3;
  for (const bool neox : {false, true}) {
    for (const int head_dim : {64, 80}) {
      const int rot = head_dim == 80 ? 64 : head_dim;  // partial rotation too
      auto x = RandomFloats(rng_, tokens * heads * head_dim);
      std::vector<int64_t> pos(tokens);
      for (auto& p : pos) p = std::uniform_int_distribution<int64_t>(0, 131071)(rng_);
      const auto factors = RandomFloats(rng_, rot / 2, 1.0f, 8.0f);
      cpu::RopeParams rp;
      rp.mode = neox ? cpu::RopeMode::kNeox : cpu::RopeMode::kNormal;
      rp.rot_dims = rot;
      rp.freq_base = 500000.0f;
      rp.freq_scale = 0.5f;
      rp.freq_factors = factors.data();
      DeviceArray<float> dx(x), df(factors);
      DeviceArray<int64_t> dp(pos);
      RopeConfig rc{neox, rot, rp.freq_base, rp.freq_scale, df.get()};
      CUDA_ASSERT_OK(Rope(dx.get(), tokens, heads, head_dim, dp.get(), rc,
                          stream_));
      ref::Rope(x.data(), tokens, heads, head_dim, pos.data(), rp);
      // Angles in double on both sides; only the final F32 rounding (and a
      // last-ulp difference of device pow/sincos) remains.
      EXPECT_LT(MaxAbs(dx.Download(), x), 1e-6) << neox << " " << head_dim;
    }
  }
}

TEST_F(CudaOpsTest, SwiGluMatchesReference) {
  const int64_t n = 100003;
  const auto g = RandomFloats(rng_, n, -20.0f, 20.0f);
  const auto u = RandomFloats(rng_, n);
  std::vector<float> want(n);
  ref::SwiGlu(g.data(), u.data(), n, want.data());
  DeviceArray<float> dg(g), du(u), dout(n);
  CUDA_ASSERT_OK(SwiGlu(dg.get(), du.get(), n, dout.get(), stream_));
  // expf (2 ulp) and a division in F32 vs double.
  EXPECT_LT(RelL2(dout.Download(), want), 1e-6);
}

TEST_F(CudaOpsTest, EmbeddingGatherIsExactForEveryType) {
  const int64_t vocab = 101, dim = 96;  // Q8_0 needs dim % 32 == 0
  const auto table = RandomFloats(rng_, vocab * dim);
  std::vector<int32_t> tokens = {0, 100, 57, 3, 57, -1, 101, 42};
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    const auto enc = Encode(t, table, vocab, dim);
    DeviceArray<uint8_t> dt(enc);
    DeviceArray<int32_t> dtok(tokens);
    DeviceArray<float> dout(tokens.size() * dim);
    CUDA_ASSERT_OK(EmbeddingGather(t, dt.get(), vocab, dim, dtok.get(),
                                   tokens.size(), 1.0f, dim, dout.get(),
                                   stream_));
    const auto got = dout.Download();
    const int64_t rb = RowBytes(t, dim);
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<float> want(dim, 0.0f);  // out of range: zeros
      if (tokens[i] >= 0 && tokens[i] < vocab) {
        ref::DequantizeRow(t, enc.data() + tokens[i] * rb, dim, want.data());
      }
      // One rounding of the same product on both sides: bit-exact.
      for (int64_t d = 0; d < dim; ++d) {
        ASSERT_EQ(got[i * dim + d], want[d]) << DTypeName(t) << " " << i;
      }
    }
  }
}

// Copies rows by index lists from device or mapped pinned host memory;
// rows not listed in dst keep their contents.
void CheckGather(cudaStream_t stream, bool from_host, int64_t row_bytes,
                 std::mt19937& rng) {
  const int64_t n_src = 300, n_dst = 64, n = 50;
  const int64_t src_stride = row_bytes + (row_bytes % 16 == 0 ? 16 : 3);
  std::vector<uint8_t> src(n_src * src_stride);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  std::vector<int32_t> src_rows(n), dst_rows(n_dst);
  for (auto& r : src_rows) r = static_cast<int32_t>(rng() % n_src);
  std::iota(dst_rows.begin(), dst_rows.end(), 0);
  std::shuffle(dst_rows.begin(), dst_rows.end(), rng);
  dst_rows.resize(n);
  void* host = nullptr;
  const void* src_dev = nullptr;
  DeviceArray<uint8_t> dsrc(from_host ? std::vector<uint8_t>{} : src);
  if (from_host) {
    CUDA_ASSERT_OK(cudaHostAlloc(&host, src.size(), cudaHostAllocMapped));
    std::memcpy(host, src.data(), src.size());
    void* mapped = nullptr;
    CUDA_ASSERT_OK(cudaHostGetDevicePointer(&mapped, host, 0));
    src_dev = mapped;
  } else {
    src_dev = dsrc.get();
  }
  DeviceArray<int32_t> ds(src_rows), dd(dst_rows);
  DeviceArray<uint8_t> dst(n_dst * row_bytes);  // 0xff until written
  CUDA_ASSERT_OK(GatherRows(src_dev, src_stride, ds.get(), dst.get(),
                            row_bytes, dd.get(), n, row_bytes, stream));
  const auto got = dst.Download();
  std::vector<uint8_t> want(n_dst * row_bytes, 0xff);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(&want[dst_rows[i] * row_bytes], &src[src_rows[i] * src_stride],
                row_bytes);
  }
  EXPECT_EQ(got, want) << "host=" << from_host << " bytes=" << row_bytes;
  if (host != nullptr) cudaFreeHost(host);
}

TEST_F(CudaOpsTest, GatherRowsCopiesExactly) {
  for (const bool from_host : {false, true}) {
    for (const int64_t row_bytes : {256, 260, 37}) {  // 16-, 4-, 1-byte units
      CheckGather(stream_, from_host, row_bytes, rng_);
    }
  }
}

TEST_F(CudaOpsTest, MatMulMatchesReferencePerWeightType) {
  GemmContext* ctx = nullptr;
  CUDA_ASSERT_OK(CreateGemmContext(&ctx));
  struct Shape { int64_t in, out, tokens; };
  for (const Shape s : {Shape{131, 77, 5}, Shape{1024, 384, 67}}) {
    const auto w = RandomFloats(rng_, s.in * s.out);
    const auto x = RandomFloats(rng_, s.tokens * s.in);
    for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      const auto enc = Encode(t, w, s.out, s.in);
      std::vector<float> want(s.tokens * s.out);
      ref::MatMul(t, enc.data(), s.in, s.out, x.data(), s.tokens, want.data());
      DeviceArray<uint8_t> dw(enc);
      DeviceArray<float> dx(x), dy(s.tokens * s.out);
      CUDA_ASSERT_OK(MatMul(ctx, t, dw.get(), s.in, s.out, dx.get(), s.tokens,
                            dy.get(), stream_));
      // The weights are exact on both sides; x is rounded to the weight
      // type on the GPU (F16: 2^-11 relative, BF16: 2^-8), which dominates
      // the F32-accumulation error. F32: a plain SGEMM vs double.
      const double tol = t == DType::kF32 ? 1e-5 : t == DType::kF16 ? 2e-3 : 1e-2;
      EXPECT_LT(RelL2(dy.Download(), want), tol)
          << DTypeName(t) << " " << s.in << "x" << s.out << "x" << s.tokens;
    }
  }
  CUDA_ASSERT_OK(DestroyGemmContext(ctx));
}

// K/V of n_kv heads x rows, random, encoded in dtype; row stride padded.
struct KvData {
  int64_t rows = 0, row_stride = 0, head_stride = 0;
  std::vector<uint8_t> k, v;
};

KvData MakeKv(std::mt19937& rng, DType t, int n_kv, int64_t rows, int hd) {
  KvData kv;
  kv.rows = rows;
  kv.row_stride = hd + 8;
  kv.head_stride = (rows + 3) * kv.row_stride;
  const int64_t total_rows = n_kv * kv.head_stride / kv.row_stride;
  kv.k = Encode(t, RandomFloats(rng, total_rows * kv.row_stride, -2.0f, 2.0f),
                total_rows, kv.row_stride);
  kv.v = Encode(t, RandomFloats(rng, total_rows * kv.row_stride), total_rows,
                kv.row_stride);
  return kv;
}

// Span of KV head g for the reference (rows: an index list or null).
cpu::KvSpan SpanOf(const KvData& kv, DType t, int g, int64_t count,
                   int64_t first_pos, const int32_t* rows) {
  cpu::KvSpan s;
  const int64_t off = RowBytes(t, g * kv.head_stride);
  s.k = kv.k.data() + off;
  s.v = kv.v.data() + off;
  s.dtype = t;
  s.stride = kv.row_stride;
  s.count = count;
  s.first_pos = first_pos;
  s.rows = rows;
  return s;
}

void CheckPrefill(cudaStream_t stream, std::mt19937& rng, DType t, int hd,
                  bool shuffled) {
  const int n_q = 37, n_heads = 6, n_kv = 2;
  const int64_t rows = 150, first_pos = 5;
  const KvData kv = MakeKv(rng, t, n_kv, rows, hd);
  const auto q = RandomFloats(rng, int64_t{n_q} * n_heads * hd);
  std::vector<int64_t> q_pos(n_q);  // the chunk is the last n_q rows
  for (int i = 0; i < n_q; ++i) q_pos[i] = first_pos + rows - n_q + i;
  if (shuffled) {
    std::shuffle(q_pos.begin(), q_pos.end(), rng);
    q_pos[3] = first_pos - 1;  // sees nothing: zeros
    q_pos[4] = first_pos;      // sees one row
  }
  std::vector<cpu::KvSpan> spans(n_heads);
  std::vector<cpu::KvSpanList> lists(n_heads);
  for (int h = 0; h < n_heads; ++h) {
    spans[h] = SpanOf(kv, t, h / (n_heads / n_kv), rows, first_pos, nullptr);
    lists[h] = {&spans[h], 1};
  }
  std::vector<float> want(q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ref::Attention({q.data(), q_pos.data(), n_q, n_heads, hd, scale,
                  lists.data(), want.data()});
  DeviceArray<uint8_t> dk(kv.k), dv(kv.v);
  DeviceArray<float> dq(q), dout(q.size());
  DeviceArray<int64_t> dpos(q_pos);
  PrefillAttentionParams p;
  p.q = dq.get();
  p.q_pos = dpos.get();
  p.n_q = n_q;
  p.n_heads = n_heads;
  p.n_kv_heads = n_kv;
  p.head_dim = hd;
  p.scale = scale;
  p.k = dk.get();
  p.v = dv.get();
  p.dtype = t;
  p.head_stride = kv.head_stride;
  p.row_stride = kv.row_stride;
  p.n_rows = rows;
  p.first_pos = first_pos;
  p.out = dout.get();
  CUDA_ASSERT_OK(PrefillAttention(p, stream));
  // Same (exactly representable) K/V on both sides; F32 dot products,
  // expf and online rescaling vs the exact two-pass double reference.
  EXPECT_LT(RelL2(dout.Download(), want), 2e-5)
      << DTypeName(t) << " hd=" << hd << " shuffled=" << shuffled;
}

TEST_F(CudaOpsTest, PrefillAttentionMatchesReference) {
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const int hd : {40, 128, 200}) {
      for (const bool shuffled : {false, true}) {
        CheckPrefill(stream_, rng_, t, hd, shuffled);
      }
    }
  }
}

// Dense (lists empty) or sparse decode of one query token per head.
void CheckDecode(cudaStream_t stream, std::mt19937& rng, DType t, int hd,
                 int64_t rows, bool sparse) {
  const int n_heads = 8, n_kv = 2;
  const KvData kv = MakeKv(rng, t, n_kv, rows, hd);
  const auto q = RandomFloats(rng, int64_t{n_heads} * hd);
  std::vector<int32_t> lists, counts(n_heads, 0);
  int64_t max_count = rows;
  const int64_t list_stride = rows + 1;
  if (sparse) {
    lists.assign(n_heads * list_stride, -1);
    max_count = 0;
    for (int h = 0; h < n_heads; ++h) {
      std::vector<int32_t> all(rows);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);  // any order, gaps
      counts[h] = h == 1 ? 0 : static_cast<int32_t>(rng() % (rows + 1));
      std::copy_n(all.begin(), counts[h], lists.begin() + h * list_stride);
      max_count = std::max<int64_t>(max_count, counts[h]);
    }
  }
  std::vector<cpu::KvSpan> spans(n_heads);
  std::vector<cpu::KvSpanList> kvl(n_heads);
  for (int h = 0; h < n_heads; ++h) {
    spans[h] = SpanOf(kv, t, h / (n_heads / n_kv),
                      sparse ? counts[h] : rows, 0,
                      sparse ? lists.data() + h * list_stride : nullptr);
    kvl[h] = {&spans[h], 1};
  }
  const int64_t q_pos = rows;  // after every row
  std::vector<float> want(q.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ref::Attention({q.data(), &q_pos, 1, n_heads, hd, scale, kvl.data(),
                  want.data()});
  DeviceArray<uint8_t> dk(kv.k), dv(kv.v);
  DeviceArray<float> dq(q), dout(q.size());
  DeviceArray<int32_t> dl(lists), dc(counts);
  DecodeAttentionParams p;
  p.q = dq.get();
  p.n_heads = n_heads;
  p.n_kv_heads = n_kv;
  p.head_dim = hd;
  p.scale = scale;
  p.k = dk.get();
  p.v = dv.get();
  p.dtype = t;
  p.head_stride = kv.head_stride;
  p.row_stride = kv.row_stride;
  p.n_rows = max_count;
  p.rows = sparse ? dl.get() : nullptr;
  p.row_counts = sparse ? dc.get() : nullptr;
  p.rows_stride = list_stride;
  p.out = dout.get();
  DeviceArray<uint8_t> ws(DecodeAttentionWorkspaceBytes(p));
  CUDA_ASSERT_OK(DecodeAttention(p, ws.get(), ws.size(), stream));
  // As for prefill, plus the split merge; sums over up to ~3000 rows in
  // F32 (error ~ sqrt(n) * 2^-24 relative).
  EXPECT_LT(RelL2(dout.Download(), want), 5e-5)
      << DTypeName(t) << " hd=" << hd << " rows=" << rows
      << " sparse=" << sparse
      << " splits=" << DecodeAttentionSplits(n_heads, max_count);
}

TEST_F(CudaOpsTest, DecodeAttentionDenseAndSparseMatchReference) {
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const int hd : {64, 100, 256}) {
      for (const int64_t rows : {0, 5, 3001}) {  // unsplit and split
        CheckDecode(stream_, rng_, t, hd, rows, false);
        CheckDecode(stream_, rng_, t, hd, rows, true);
      }
    }
  }
}

TEST_F(CudaOpsTest, InvalidShapesAreRejected) {
  DecodeAttentionParams p;  // n_heads = 0
  EXPECT_EQ(DecodeAttention(p, nullptr, 0, stream_), cudaErrorInvalidValue);
  p.n_heads = 4;
  p.n_kv_heads = 3;  // does not divide
  p.head_dim = 64;
  EXPECT_EQ(DecodeAttention(p, nullptr, 0, stream_), cudaErrorInvalidValue);
  PrefillAttentionParams pp;
  pp.n_q = 1;
  pp.n_heads = pp.n_kv_heads = 1;
  pp.head_dim = 300;  // > 256
  EXPECT_EQ(PrefillAttention(pp, stream_), cudaErrorInvalidValue);
  RopeConfig rc;
  rc.rot_dims = 3;  // odd
  EXPECT_EQ(Rope(nullptr, 1, 1, 4, nullptr, rc, stream_),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ckv::kernels::cuda
