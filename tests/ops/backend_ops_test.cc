// The one op suite every backend runs (ggml's test-backend-ops is the
// model): each op of the Backend seam (model/backend/backend.h) on random
// inputs of odd sizes, against the reference ops of kernels/ref/ computed
// here on the same inputs, with a tolerance per dtype. Parameterised over
// every backend this build makes -- the CPU backend at 1 and 3 threads, the
// device backend on the fake device on the inline and threaded schedules
// -- times every CPU kernel table this machine runs (the CPU backend's
// kernels and the fake's op bodies use the active table); then the fake
// with BF16 weight storage and the CUDA backend (skipped without a device).
//
// Tolerances (all relative to the magnitude of the exact result's terms):
//   Add, AddBias               exact (one F32 add, as the reference rounds)
//   Embed                      1e-6 (dequantisers: FMA contraction only);
//                              BF16-stored tables 2^-9
//   MatMul, Logits             2e-6 of sum |w x| in F32 accumulation, plus
//                              the exact bound of the 8-bit activation
//                              rounding on tables with integer dot products;
//                              BF16 storage and CUDA: GemmTolerance below
//   RmsNorm                    1e-5;  Rope 2e-6 (inputs in [-1, 1]);
//   Gate (SwiGLU, GELU-tanh)   2e-6 of |gate * up|;  Attention 3e-5
//   The avx512_bf16 table: its GEMM 2^-7, its prefill attention tiles 6e-3
//   (the stated BF16 bounds of tests/kernels); CUDA's tensor-core prefill
//   attention 1e-4 (backend_ops_fixture.h kTileAttentionTolerance)
#include "tests/ops/backend_ops_fixture.h"

namespace ckv::backend_ops {
namespace {

TEST_P(BackendOpsTest, EmbedEveryTypeMatchesTheReferenceDequantiser) {
  for (DType t : kAllTypes) {
    const int64_t cols = OddCols(t, 0), vocab = 11;
    const std::vector<float> wf = RandomFloats(rng_, vocab * cols, -2, 2);
    const Matrix table = Weights(t, wf, vocab, cols);
    for (float scale : {1.0f, 0.37f}) {
      Backend& b = Fresh();
      const Activation out = b.NewActivation(cols);
      const std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
      b.BeginStep(Positions(5));
      b.Embed(table, tokens, scale, out);
      const std::vector<float> got = Read(out);
      b.EndStep();
      std::vector<float> want(cols);
      for (size_t r = 0; r < tokens.size(); ++r) {
        ref::DequantizeRow(t,
                           static_cast<const uint8_t*>(table.data) +
                               tokens[r] * kernels::RowBytes(t, cols),
                           cols, want.data());
        for (int64_t j = 0; j < cols; ++j) {
          const double w = double{want[j]} * scale;
          ASSERT_NEAR(got[r * cols + j], w,
                      EmbedTolerance(t) * (1 + std::fabs(w)))
              << kernels::DTypeName(t) << " row " << r << " col " << j;
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, MatMulEveryTypeOddSizes) {
  for (DType t : kAllTypes) {
    for (int variant : {0, 1}) {
      const int64_t n_in = OddCols(t, variant);
      for (int64_t n_out : {1, 13}) {
        for (int64_t rows : {1, 5, 17}) {
          const std::vector<float> wf = RandomFloats(rng_, n_out * n_in);
          const std::vector<float> x = RandomFloats(rng_, rows * n_in);
          const Matrix w = Weights(t, wf, n_out, n_in);
          Backend& b = Fresh();
          const Activation xa = b.NewActivation(n_in);
          const Activation ya = b.NewActivation(n_out);
          b.BeginStep(Positions(rows));
          Load(xa, x, n_in);
          b.MatMul(w, xa, ya);
          const std::vector<float> got = Read(ya);
          b.EndStep();
          std::vector<float> want(rows * n_out), row(n_in);
          ref::MatMul(t, w.data, n_in, n_out, x.data(), rows, want.data());
          for (int64_t o = 0; o < n_out; ++o) {
            ref::DequantizeRow(t,
                               static_cast<const uint8_t*>(w.data) +
                                   o * kernels::RowBytes(t, n_in),
                               n_in, row.data());
            for (int64_t r = 0; r < rows; ++r) {
              const float* xr = x.data() + r * n_in;
              double mag = 0;
              for (int64_t i = 0; i < n_in; ++i)
                mag += std::fabs(row[i] * xr[i]);
              const double act =
                  QuantisesActs(t)
                      ? 1.001 * ActQuantBound(row.data(), xr, n_in,
                                              kernels::BlockSize(t))
                      : 0.0;
              ASSERT_NEAR(got[r * n_out + o], want[r * n_out + o],
                          GemmTolerance(t, rows) * mag + act + 1e-6)
                  << kernels::DTypeName(t) << " n_in=" << n_in
                  << " n_out=" << n_out << " rows=" << rows << " o=" << o
                  << " r=" << r;
            }
          }
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, AddAndAddBiasAreExact) {
  for (int64_t width : {1, 67}) {
    for (int64_t rows : {1, 6}) {
      const std::vector<float> x = RandomFloats(rng_, rows * width, -3, 3);
      const std::vector<float> y = RandomFloats(rng_, rows * width, -3, 3);
      const std::vector<float>& bias = Keep(RandomFloats(rng_, width));
      Backend& b = Fresh();
      const Activation xa = b.NewActivation(width);
      const Activation ya = b.NewActivation(width);
      b.BeginStep(Positions(rows));
      Load(xa, x, width);
      Load(ya, y, width);
      b.Add(xa, ya);
      const std::vector<float> sum = Read(xa);
      b.AddBias(ya, bias);
      const std::vector<float> biased = Read(ya);
      b.EndStep();
      std::vector<float> want_sum = x, want_biased = y;
      ref::Add(want_sum.data(), y.data(), rows * width);
      ref::AddBias(want_biased.data(), bias.data(), rows, width);
      for (int64_t i = 0; i < rows * width; ++i) {
        ASSERT_EQ(sum[i], want_sum[i]) << "width " << width << " i " << i;
        ASSERT_EQ(biased[i], want_biased[i]) << "width " << width << " i " << i;
      }
    }
  }
}

TEST_P(BackendOpsTest, RmsNormWholeRowsAndPerHead) {
  // (width, norm length): whole rows, and per head (Q/K norms).
  const std::pair<int64_t, int64_t> shapes[] = {{67, 67}, {72, 12}, {5, 1}};
  for (const auto& [width, n] : shapes) {
    for (int64_t rows : {1, 7}) {
      const std::vector<float> x = RandomFloats(rng_, rows * width, -4, 4);
      const std::vector<float>& w = Keep(RandomFloats(rng_, n, 0.5f, 1.5f));
      Backend& b = Fresh();
      const Activation xa = b.NewActivation(width);
      const Activation out = b.NewActivation(width);
      b.BeginStep(Positions(rows));
      Load(xa, x, width);
      b.RmsNorm(xa, w, 1e-5f, out);
      const std::vector<float> got = Read(out);
      b.RmsNorm(xa, w, 1e-5f, xa);  // in place
      const std::vector<float> in_place = Read(xa);
      b.EndStep();
      std::vector<float> want(rows * width);
      ref::RmsNorm(x.data(), w.data(), rows * width / n, n, 1e-5f, want.data());
      for (int64_t i = 0; i < rows * width; ++i) {
        const double tol = 1e-5 * (std::fabs(want[i]) + 1e-3);
        ASSERT_NEAR(got[i], want[i], tol) << width << "/" << n << " i " << i;
        ASSERT_NEAR(in_place[i], want[i], tol) << width << "/" << n;
      }
    }
  }
}

TEST_P(BackendOpsTest, RopeStylesPartialRotaryFactorsAndLongPositions) {
  const int n_heads = 3;
  const std::vector<int64_t> positions = {0, 1, 37, 4095, 31000};
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (int head_dim : {16, 18}) {
      for (int rot_dims : {head_dim, 8}) {
        for (int variant : {0, 1}) {
          RopeSpec spec;
          spec.style = style;
          spec.rot_dims = rot_dims;
          spec.freq_base = variant == 0 ? 10000.0f : 500000.0f;
          spec.freq_scale = variant == 0 ? 1.0f : 0.25f;
          spec.attn_factor = variant == 0 ? 1.0f : 1.19f;
          if (variant == 1) {
            spec.freq_factors =
                Keep(RandomFloats(rng_, rot_dims / 2, 1.0f, 8.0f)).data();
          }
          const int64_t width = int64_t{n_heads} * head_dim;
          const int64_t rows = static_cast<int64_t>(positions.size());
          const std::vector<float> x = RandomFloats(rng_, rows * width);
          Backend& b = Fresh();
          const Activation xa = b.NewActivation(width);
          b.BeginStep(positions);
          Load(xa, x, width);
          b.Rope(xa, n_heads, spec);
          const std::vector<float> got = Read(xa);
          b.EndStep();
          kernels::RopeParams p;
          p.mode = style == RopeStyle::kNeox ? kernels::RopeMode::kNeox
                                             : kernels::RopeMode::kNormal;
          p.rot_dims = rot_dims;
          p.freq_base = spec.freq_base;
          p.freq_scale = spec.freq_scale;
          p.freq_factors = spec.freq_factors;
          p.attn_factor = spec.attn_factor;
          std::vector<float> want = x;
          ref::Rope(want.data(), rows, n_heads, head_dim, positions.data(), p);
          for (int64_t i = 0; i < rows * width; ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-6 * spec.attn_factor)
                << "style " << static_cast<int>(style) << " hd " << head_dim
                << " rot " << rot_dims << " variant " << variant << " i " << i;
          }
        }
      }
    }
  }
}

TEST_P(BackendOpsTest, GateSwiGluAndGeluTanh) {
  for (FfnActivation act :
       {FfnActivation::kSiluGate, FfnActivation::kGeluTanhGate}) {
    for (int64_t width : {1, 67, 200}) {
      const int64_t rows = 3;
      const std::vector<float> g = RandomFloats(rng_, rows * width, -6, 6);
      const std::vector<float> u = RandomFloats(rng_, rows * width, -2, 2);
      Backend& b = Fresh();
      const Activation ga = b.NewActivation(width);
      const Activation ua = b.NewActivation(width);
      const Activation out = b.NewActivation(width);
      b.BeginStep(Positions(rows));
      Load(ga, g, width);
      Load(ua, u, width);
      b.Gate(act, ga, ua, out);
      const std::vector<float> got = Read(out);
      b.EndStep();
      std::vector<float> want(rows * width);
      if (act == FfnActivation::kSiluGate) {
        ref::SwiGlu(g.data(), u.data(), rows * width, want.data());
      } else {
        ref::GeluTanhGate(g.data(), u.data(), rows * width, want.data());
      }
      for (int64_t i = 0; i < rows * width; ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-6 * (std::fabs(g[i] * u[i]) + 1e-3))
            << "act " << static_cast<int>(act) << " g " << g[i];
      }
    }
  }
}

TEST_P(BackendOpsTest, LogitsPickedRowsNormOutputSoftcap) {
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_K}) {
    for (float softcap : {0.0f, 15.0f}) {
      const int64_t width = OddCols(t, 0), vocab = 37, rows = 4;
      const std::vector<float> x = RandomFloats(rng_, rows * width, -3, 3);
      const std::vector<float>& norm =
          Keep(RandomFloats(rng_, width, 0.5f, 1.5f));
      const Matrix w =
          Weights(t, RandomFloats(rng_, vocab * width), vocab, width);
      const std::vector<int64_t> picked = {0, 2, 3};
      Backend& b = Fresh();
      const Activation xa = b.NewActivation(width);
      b.BeginStep(Positions(rows));
      Load(xa, x, width);
      std::vector<float> got;
      b.Logits(xa, picked, norm, 1e-5f, w, softcap, &got);
      EXPECT_TRUE(b.status().ok()) << b.status();
      b.EndStep();
      ASSERT_EQ(got.size(), picked.size() * vocab);
      std::vector<float> xn(width), want(vocab), row(width);
      for (size_t j = 0; j < picked.size(); ++j) {
        ref::RmsNorm(x.data() + picked[j] * width, norm.data(), 1, width, 1e-5f,
                     xn.data());
        ref::MatMul(t, w.data, width, vocab, xn.data(), 1, want.data());
        if (softcap > 0) ref::SoftCap(want.data(), vocab, softcap);
        for (int64_t o = 0; o < vocab; ++o) {
          ref::DequantizeRow(t,
                             static_cast<const uint8_t*>(w.data) +
                                 o * kernels::RowBytes(t, width),
                             width, row.data());
          double mag = 0;
          for (int64_t i = 0; i < width; ++i) mag += std::fabs(row[i] * xn[i]);
          // The norm's rounding (1e-5 relative per element) propagates
          // through the product; softcap only shrinks differences.
          const double act =
              QuantisesActs(t)
                  ? 1.001 * ActQuantBound(row.data(), xn.data(), width,
                                          kernels::BlockSize(t))
                  : 0.0;
          ASSERT_NEAR(got[j * vocab + o], want[o],
                      (1e-5 + GemmTolerance(t)) * mag + act + 1e-6)
              << kernels::DTypeName(t) << " softcap " << softcap << " row "
              << picked[j] << " o " << o;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendOpsTest,
                         ::testing::ValuesIn(AllBackends()),
                         [](const ::testing::TestParamInfo<BackendCase>& i) {
                           return i.param.name;
                         });

}  // namespace
}  // namespace ckv::backend_ops
