// Every CUDA op of kernels/cuda against its reference (kernels/ref,
// ref::), on random inputs with odd sizes, per dtype, in the manner of
// ggml's test-backend-ops. Cluster ops: cluster_ops_test.cc. Without a
// device every test reports SKIPPED. Each tolerance states its reason.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm_rope_swiglu.h"
#include "kernels/ref/ops.h"
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

TEST_F(CudaOpsTest, InvalidShapesAreRejected) {
  RopeConfig rc;
  rc.rot_dims = 3;  // odd
  EXPECT_EQ(Rope(nullptr, 1, 1, 4, nullptr, rc, stream_),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ckv::kernels::cuda
