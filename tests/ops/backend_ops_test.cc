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
//   (the stated BF16 bounds of tests/kernels)
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/kernel_set.h"
#include "kernels/cpu/quant.h"
#include "kernels/ref/ops.h"
#include "model/backend/backend.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/backend/device/device_backend.h"
#include "model/dense_kv_cache.h"
#include "model/kv/clustered_store.h"
#include "tests/kernels/test_util.h"

namespace ckv {
namespace {

namespace ref = kernels::ref;
using kernels::DType;
using kernels::cpu::KernelSet;
using kernels::cpu::testing::ActQuantBound;
using kernels::cpu::testing::AvailableKernelSets;
using kernels::cpu::testing::Encode;
using kernels::cpu::testing::RandomFloats;
using kernels::cpu::testing::ScopedKernels;
using kernels::device::Schedule;

struct BackendCase {
  std::string name;
  BackendKind kind = BackendKind::kCpu;
  int threads = 1;
  Schedule schedule = Schedule::kInline;
  const KernelSet* table = nullptr;
  // Matrices other than F32/F16/BF16 reach the ops as BF16 (the CUDA
  // backend; the fake's "bf16" case does the same on the host).
  bool bf16_weights = false;
};

std::vector<BackendCase> AllBackends() {
  std::vector<BackendCase> out;
  for (const KernelSet* ks : AvailableKernelSets()) {
    const std::string t = ks->name;
    out.push_back({t + "_cpu1", BackendKind::kCpu, 1, Schedule::kInline, ks});
    out.push_back({t + "_cpu3", BackendKind::kCpu, 3, Schedule::kInline, ks});
    out.push_back(
        {t + "_fake_inline", BackendKind::kFake, 1, Schedule::kInline, ks});
    out.push_back(
        {t + "_fake_threaded", BackendKind::kFake, 1, Schedule::kThreaded, ks});
  }
  const KernelSet* first = AvailableKernelSets().front();
  out.push_back(
      {"fake_bf16", BackendKind::kFake, 1, Schedule::kInline, first, true});
  // Skipped (SetUp) where this build has no CUDA backend or no device.
  out.push_back(
      {"cuda", BackendKind::kCuda, 1, Schedule::kInline, first, true});
  return out;
}

// Attention of n_heads query heads of head_dim, scaled by 1/sqrt(head_dim).
AttentionSpec SpecOf(int n_heads, int head_dim) {
  AttentionSpec spec;
  spec.n_heads = n_heads;
  spec.head_dim = head_dim;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return spec;
}

bool StoredAsIs(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

const DType kAllTypes[] = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// An odd row length that type t can store (a multiple of its block).
int64_t OddCols(DType t, int variant) {
  const int64_t bs = kernels::BlockSize(t);
  if (bs == 1) return variant == 0 ? 67 : 130;
  if (bs == 32) return variant == 0 ? 96 : 288;
  return variant == 0 ? 256 : 768;
}

class BackendOpsTest : public ::testing::TestWithParam<BackendCase> {
 protected:
  void SetUp() override {
    if (GetParam().kind == BackendKind::kCuda && !CudaDeviceStatus().ok()) {
      GTEST_SKIP() << CudaDeviceStatus().message();
    }
  }
  // A fresh backend (activations are made before its first step).
  // stream_chunk: device backends stream an attention's copied rows in
  // chunks of this many bytes (BackendOptions::kv_stream_chunk_bytes).
  Backend& Fresh(
      int64_t stream_chunk = BackendOptions{}.kv_stream_chunk_bytes) {
    backend_.reset();
    BackendOptions o;
    o.kv_stream_chunk_bytes = stream_chunk;
    o.threads = GetParam().threads;
    o.fake_schedule = GetParam().schedule;
    o.fake_device_bytes = int64_t{64} << 20;
    o.fake_seed = 7;
    o.fake_max_delay_us = 20;
    o.fake_bf16_weights = GetParam().bf16_weights;
    auto made = MakeBackend(GetParam().kind, o);
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) backend_ = std::move(*made);
    return *backend_;
  }

  // Host data the backend may key by address: kept for the test's life.
  template <typename T>
  const std::vector<T>& Keep(std::vector<T> v) {
    if constexpr (std::is_same_v<T, float>) {
      return floats_.emplace_back(std::move(v));
    } else {
      return bytes_.emplace_back(std::move(v));
    }
  }
  Matrix Weights(DType t, const std::vector<float>& w, int64_t rows,
                 int64_t cols) {
    const std::vector<uint8_t>& enc = Keep(Encode(t, w, rows, cols));
    return Matrix{t, enc.data(), rows, cols};
  }

  // Writes rows x width floats into `a` (an F32 embedding, scale 1: exact).
  void Load(Activation a, const std::vector<float>& x, int64_t width) {
    const int64_t rows = static_cast<int64_t>(x.size()) / width;
    const std::vector<float>& table = Keep(x);
    std::vector<int32_t> ids(rows);
    for (int64_t r = 0; r < rows; ++r) ids[r] = static_cast<int32_t>(r);
    backend_->Embed(Matrix{DType::kF32, table.data(), rows, width}, ids, 1.0f,
                    a);
  }
  std::vector<float> Read(Activation a) {
    std::vector<float> out;
    backend_->ReadRows(a, &out);
    EXPECT_TRUE(backend_->status().ok()) << backend_->status();
    return out;
  }
  // One step's attention over `parts` on a fresh backend (or on `on`,
  // whose caches' env it made): q, k and v hold the step's rows (at
  // positions pos); returns the output rows.
  std::vector<float> AttendStep(
      int64_t stream_chunk, const AttentionSpec& spec, int64_t kv_dim,
      absl::Span<const AttentionPart> parts, const std::vector<int64_t>& pos,
      const std::vector<float>& q, const std::vector<float>& k,
      const std::vector<float>& v, Backend* on = nullptr) {
    const int64_t q_dim = int64_t{spec.n_heads} * spec.head_dim;
    Backend& b = on != nullptr ? *on : Fresh(stream_chunk);
    const Activation qa = b.NewActivation(q_dim);
    const Activation ka = b.NewActivation(kv_dim);
    const Activation va = b.NewActivation(kv_dim);
    const Activation out = b.NewActivation(q_dim);
    b.BeginStep(pos);
    Load(qa, q, q_dim);
    Load(ka, k, kv_dim);
    Load(va, v, kv_dim);
    b.Attention(0, spec, parts, qa, ka, va, out, nullptr);
    b.FinishAppends();
    std::vector<float> got = Read(out);
    b.EndStep();
    return got;
  }
  bool QuantisesActs(DType t) const {
    return kernels::IsQuantized(t) && GetParam().table->quant_gemv != nullptr &&
           !GetParam().bf16_weights;
  }
  // Of sum |w x|: how far a product with weights of type t may be from the
  // exact one. CPU and fake: F32 accumulation (2e-6). Weights stored as
  // BF16 (bf16 cases, types other than F32/F16/BF16): one rounding of each
  // w, <= 2^-9 relative. CUDA also rounds x to the weight's type before
  // cuBLAS (2^-9 for BF16, 2^-11 for F16) and sums in another order (F32
  // weights: 1e-5, n_in <= 768 terms). The avx512_bf16 table's GEMM
  // (from kGemmMinTokens rows on) rounds w and x to BF16: the stated 2^-7
  // (tests/kernels/ops_test.cc).
  double GemmTolerance(DType t, int64_t rows = 1) const {
    const double w_round =
        GetParam().bf16_weights && !StoredAsIs(t) ? 1.0 / 512 : 0.0;
    const double bf16_gemm = GetParam().table->gemm_bf16_tile != nullptr &&
                                     rows >= kernels::cpu::kGemmMinTokens
                                 ? 1.0 / 128
                                 : 0.0;
    if (GetParam().kind != BackendKind::kCuda) {
      return 2e-6 + w_round + bf16_gemm;
    }
    if (t == DType::kF32) return 1e-5;
    const double x_round = t == DType::kF16 ? 1.0 / 2048 : 1.0 / 512;
    return w_round + x_round + 1e-5;
  }
  // Embedding rows: the dequantiser (1e-6), or BF16 storage (2^-9).
  double EmbedTolerance(DType t) const {
    return GetParam().bf16_weights && !StoredAsIs(t) ? 1.0 / 512 : 1e-6;
  }

  std::mt19937 rng_{20261204};
  ScopedKernels scoped_{GetParam().table};
  std::deque<std::vector<float>> floats_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::unique_ptr<Backend> backend_;  // destroyed before the data it keys
};

std::vector<int64_t> Positions(int64_t n, int64_t first = 0) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

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

// Two sequences in one step (a decode row after 9 cached tokens, and a
// 4-row prefill chunk of an empty sequence), GQA 3:1, F32 dense caches:
// the backend appends the step's K/V, asks each cache what to attend and
// attends it; the reference attends every cached row of the sequence.
// Also streamed: with a stream chunk of 300 bytes a device backend cuts
// each part's rows into chunks of one or two rows (GQA groups, window and
// softcap across chunk edges), folds them into the running softmax state
// and finishes; the result is the same attention. Mixed (-1): a chunk that
// the decode part's rows exceed and the prefill part's 4 do not, with
// the prefill part first: it is attended (alone) before the streamed one.
// ref::Attention of q's rows [row, row + n_q) (positions pos[row..]) over
// one sequence's F32 K/V rows [n_rows][n_kv * head_dim] (query head h reads
// KV head h / (n_heads / n_kv)), into the same rows of *want.
void RefAttend(const AttentionSpec& spec, int n_kv, const std::vector<float>& q,
               const std::vector<int64_t>& pos, const std::vector<float>& ks,
               const std::vector<float>& vs, int64_t n_rows, int64_t row,
               int64_t n_q, std::vector<float>* want) {
  const int n_heads = spec.n_heads, head_dim = spec.head_dim;
  const int64_t q_dim = int64_t{n_heads} * head_dim;
  std::vector<kernels::KvSpan> spans(n_heads);
  std::vector<kernels::KvSpanList> lists(n_heads);
  for (int h = 0; h < n_heads; ++h) {
    const int g = h / (n_heads / n_kv);
    spans[h] = {ks.data() + g * head_dim,
                vs.data() + g * head_dim,
                DType::kF32,
                int64_t{n_kv} * head_dim,
                n_rows,
                0};
    lists[h] = {&spans[h], 1};
  }
  kernels::AttentionArgs args;
  args.q = q.data() + row * q_dim;
  args.q_pos = &pos[row];
  args.n_q = static_cast<int>(n_q);
  args.n_heads = n_heads;
  args.head_dim = head_dim;
  args.scale = spec.scale;
  args.kv = lists.data();
  args.out = want->data() + row * q_dim;
  args.softcap = spec.softcap;
  args.window = spec.window;
  ref::Attention(args);
}

TEST_P(BackendOpsTest, AttentionGqaSoftcapWindowTwoSequences) {
  const int n_heads = 6, n_kv = 2;
  for (const int64_t chunk_case :
       {BackendOptions{}.kv_stream_chunk_bytes, int64_t{300}, int64_t{-1}}) {
    for (int head_dim : {16, 67}) {
      // K and V of 4.5 rows of both KV heads: the decode part attends 10
      // rows (5 in the window), the prefill part 4.
      const int64_t stream_chunk =
          chunk_case >= 0 ? chunk_case : 2 * n_kv * head_dim * 4 * 9 / 2;
      for (float softcap : {0.0f, 30.0f}) {
        for (int64_t window : {int64_t{0}, int64_t{5}}) {
          const int64_t q_dim = int64_t{n_heads} * head_dim;
          const int64_t kv_dim = int64_t{n_kv} * head_dim;
          const int64_t history = 9, rows = 5;
          DenseKvCacheOptions co;
          co.n_layers = 1;
          co.n_heads = n_heads;
          co.n_kv_heads = n_kv;
          co.head_dim = head_dim;
          co.dtype = DType::kF32;
          co.layer_window = {static_cast<int32_t>(window)};
          DenseKvCache a(co), c(co);
          // All K/V rows of each sequence: history first, then the step's.
          std::vector<float> ka = RandomFloats(rng_, (history + 1) * kv_dim);
          std::vector<float> va = RandomFloats(rng_, (history + 1) * kv_dim);
          const std::vector<float> kc = RandomFloats(rng_, 4 * kv_dim);
          const std::vector<float> vc = RandomFloats(rng_, 4 * kv_dim);
          ASSERT_TRUE(a.Reserve(history, AppendKind::kPrompt).ok());
          a.Append(0, history, ka.data(), va.data());
          a.Commit(history);
          const std::vector<float> q = RandomFloats(rng_, rows * q_dim, -2, 2);
          std::vector<float> k_step(ka.end() - kv_dim, ka.end());
          k_step.insert(k_step.end(), kc.begin(), kc.end());
          std::vector<float> v_step(va.end() - kv_dim, va.end());
          v_step.insert(v_step.end(), vc.begin(), vc.end());

          const std::vector<int64_t> pos = {history, 0, 1, 2, 3};
          ASSERT_TRUE(a.Reserve(1, AppendKind::kGenerated).ok());
          ASSERT_TRUE(c.Reserve(4, AppendKind::kPrompt).ok());
          AttentionSpec spec = SpecOf(n_heads, head_dim);
          spec.softcap = softcap;
          spec.window = window;
          const AttentionPart parts[] = {{&a, 0, 1}, {&c, 1, 4}};
          const AttentionPart prefill_first[] = {parts[1], parts[0]};
          const std::vector<float> got = AttendStep(
              stream_chunk, spec, kv_dim,
              chunk_case < 0 ? prefill_first : parts, pos, q, k_step, v_step);
          a.Commit(1);
          c.Commit(4);
          if (const auto* d =
                  dynamic_cast<const DeviceBackend*>(backend_.get())) {
            const AttendCopyStats& st = d->attend_copies();
            if (chunk_case < 0) {  // the decode part streams
              EXPECT_EQ(st.streamed_parts, 1);
              EXPECT_EQ(st.attention_ops, 1);
              EXPECT_EQ(st.batched_parts, 1);
            } else if (stream_chunk < 1000) {  // both, several chunks each
              EXPECT_EQ(st.streamed_parts, 2);
              EXPECT_GT(st.streamed_chunks, 4);
              EXPECT_LE(st.largest_chunk_bytes,
                        std::max<int64_t>(stream_chunk, 2 * 320));
            } else {  // the two parts attended by one op
              EXPECT_EQ(st.streamed_parts, 0);
              EXPECT_EQ(st.attention_ops, 1);
              EXPECT_EQ(st.batched_parts, 2);
            }
          }

          std::vector<float> want(rows * q_dim);
          RefAttend(spec, n_kv, q, pos, ka, va, history + 1, 0, 1, &want);
          RefAttend(spec, n_kv, q, pos, kc, vc, 4, 1, 4, &want);
          // The second part's 4 queries may take BF16 tiles.
          const double tol = kernels::cpu::testing::AttentionTolerance(4);
          for (int64_t i = 0; i < rows * q_dim; ++i) {
            ASSERT_NEAR(got[i], want[i], tol)
                << "hd " << head_dim << " softcap " << softcap << " window "
                << window << " row " << i / q_dim << " chunk " << stream_chunk;
          }
        }
      }
    }
  }
}

// Three decoding sequences in one call (on a device: one batched
// attention op, a head table per query row) with histories of 0, 6 and 39
// rows, KV stored in F16 and BF16, head dims 80 and 256 (a 4:1 GQA
// group): each row equals ref::Attention over its own sequence. The K/V
// values are rounded to the storage type first, so the reference reads
// exactly what the caches hold.
TEST_P(BackendOpsTest, AttentionThreeDecodeSequencesF16Bf16) {
  const int n_heads = 8, n_kv = 2;
  const int64_t histories[] = {0, 6, 39};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    auto stored = [dt](std::vector<float> x) {
      for (float& f : x) {
        f = dt == DType::kF16 ? kernels::F16ToF32(kernels::F32ToF16(f))
                              : kernels::BF16ToF32(kernels::F32ToBF16(f));
      }
      return x;
    };
    for (int head_dim : {80, 256}) {
      const int64_t q_dim = int64_t{n_heads} * head_dim;
      const int64_t kv_dim = int64_t{n_kv} * head_dim;
      DenseKvCacheOptions co;
      co.n_layers = 1;
      co.n_heads = n_heads;
      co.n_kv_heads = n_kv;
      co.head_dim = head_dim;
      co.dtype = dt;
      std::vector<std::unique_ptr<DenseKvCache>> caches;
      std::vector<std::vector<float>> ks, vs;  // history + the step's row
      std::vector<float> k_step, v_step;
      for (const int64_t h : histories) {
        caches.push_back(std::make_unique<DenseKvCache>(co));
        ks.push_back(stored(RandomFloats(rng_, (h + 1) * kv_dim)));
        vs.push_back(stored(RandomFloats(rng_, (h + 1) * kv_dim)));
        if (h > 0) {
          ASSERT_TRUE(caches.back()->Reserve(h, AppendKind::kPrompt).ok());
          caches.back()->Append(0, h, ks.back().data(), vs.back().data());
          caches.back()->Commit(h);
        }
        k_step.insert(k_step.end(), ks.back().end() - kv_dim, ks.back().end());
        v_step.insert(v_step.end(), vs.back().end() - kv_dim, vs.back().end());
        ASSERT_TRUE(caches.back()->Reserve(1, AppendKind::kGenerated).ok());
      }
      const std::vector<float> q = RandomFloats(rng_, 3 * q_dim, -2, 2);
      const std::vector<int64_t> pos(std::begin(histories),
                                     std::end(histories));
      const AttentionSpec spec = SpecOf(n_heads, head_dim);
      const AttentionPart parts[] = {{caches[0].get(), 0, 1},
                                     {caches[1].get(), 1, 1},
                                     {caches[2].get(), 2, 1}};
      const std::vector<float> got =
          AttendStep(BackendOptions{}.kv_stream_chunk_bytes, spec, kv_dim,
                     parts, pos, q, k_step, v_step);
      for (auto& c : caches) c->Commit(1);
      if (const auto* d = dynamic_cast<const DeviceBackend*>(backend_.get())) {
        EXPECT_EQ(d->attend_copies().attention_ops, 1);
        EXPECT_EQ(d->attend_copies().batched_parts, 3);
      }
      std::vector<float> want(3 * q_dim);
      for (int s = 0; s < 3; ++s) {
        RefAttend(spec, n_kv, q, pos, ks[s], vs[s], histories[s] + 1, s, 1,
                  &want);
        const double tol = kernels::cpu::testing::AttentionTolerance(1);
        for (int64_t i = 0; i < q_dim; ++i) {
          ASSERT_NEAR(got[s * q_dim + i], want[s * q_dim + i], tol)
              << kernels::DTypeName(dt) << " hd " << head_dim << " sequence "
              << s << " element " << i;
        }
      }
    }
  }
}

// The KV append: stores made with the backend's store env take a step's
// K,V rows (a device writes them on the device and copies them back)
// rounded to F16 or BF16 with the host's bits: ties to even, subnormals,
// overflow to inf, -0, NaN. A prefill part (5 rows, 2 into the sinks) and
// a decode part over 3 rows of history in one step.
TEST_P(BackendOpsTest, KvAppendRoundsAsTheHost) {
  const int n_heads = 4, n_kv = 2;
  const float special[] = {65504.0f, 65519.0f,     65520.0f, 7e4f,
                           -0.0f,    3e-5f,        1e-8f,    1.00048828125f,
                           -2.5e38f, std::nanf("")};
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (int head_dim : {80, 256}) {
      const int64_t q_dim = int64_t{n_heads} * head_dim;
      const int64_t kv_dim = int64_t{n_kv} * head_dim;
      Backend& b = Fresh();
      const KvShape shape{1, n_heads, n_kv, head_dim};
      KvStoreConfig c;
      c.policy = KvPolicy::kFull;
      c.kv_dtype = dt;
      c.sink_tokens = 2;
      c.async_clustering = false;
      ClusteredKvStore a(shape, c, nullptr, b.store_env());
      ClusteredKvStore d(shape, c, nullptr, b.store_env());
      const std::vector<float> hist = RandomFloats(rng_, 3 * kv_dim);
      ASSERT_TRUE(d.Reserve(3, AppendKind::kPrompt).ok());
      d.Append(0, 3, hist.data(), hist.data());
      d.Commit(3);
      std::vector<float> k = RandomFloats(rng_, 6 * kv_dim, -4, 4);
      std::vector<float> v = RandomFloats(rng_, 6 * kv_dim, -4, 4);
      for (size_t i = 0; i < std::size(special); ++i) {
        k[i * 37 % k.size()] = special[i];
        v[(i * 53 + 5) % v.size()] = special[i];
      }
      ASSERT_TRUE(a.Reserve(5, AppendKind::kPrompt).ok());
      ASSERT_TRUE(d.Reserve(1, AppendKind::kGenerated).ok());
      const AttentionSpec spec = SpecOf(n_heads, head_dim);
      const AttentionPart parts[] = {{&a, 0, 5}, {&d, 5, 1}};
      AttendStep(BackendOptions{}.kv_stream_chunk_bytes, spec, kv_dim, parts,
                 {0, 1, 2, 3, 4, 3}, RandomFloats(rng_, 6 * q_dim), k, v, &b);
      a.Commit(5);
      d.Commit(1);
      ASSERT_TRUE(b.status().ok()) << b.status();
      // Host rows of (store, first step row, rows): positions in order.
      const std::pair<ClusteredKvStore*, int64_t> stores[] = {{&a, 0}, {&d, 5}};
      for (const auto& [store, row0] : stores) {
        for (int g = 0; g < n_kv; ++g) {
          std::vector<uint16_t> kb, vb;
          for (const kernels::KvSpan& sp : store->HostSpans(0, g)) {
            const auto* ks = static_cast<const uint16_t*>(sp.k);
            const auto* vs = static_cast<const uint16_t*>(sp.v);
            kb.insert(kb.end(), ks, ks + sp.count * head_dim);
            vb.insert(vb.end(), vs, vs + sp.count * head_dim);
          }
          const int64_t n = row0 == 0 ? 5 : 1, skip = row0 == 0 ? 0 : 3;
          ASSERT_EQ(kb.size(), static_cast<size_t>((skip + n) * head_dim));
          for (int64_t r = 0; r < n; ++r) {
            for (int e = 0; e < head_dim; ++e) {
              const int64_t at = (row0 + r) * kv_dim + g * head_dim + e;
              auto bits = [dt](float f) {
                return dt == DType::kF16 ? kernels::F32ToF16(f)
                                         : kernels::F32ToBF16(f);
              };
              const size_t got = static_cast<size_t>((skip + r) * head_dim + e);
              ASSERT_EQ(kb[got], bits(k[at]))
                  << kernels::DTypeName(dt) << " k row " << r << " of " << row0
                  << " head " << g << " element " << e;
              ASSERT_EQ(vb[got], bits(v[at]))
                  << kernels::DTypeName(dt) << " v row " << r << " of " << row0
                  << " head " << g << " element " << e;
            }
          }
        }
      }
      if (const auto* dev = dynamic_cast<const DeviceBackend*>(&b)) {
        EXPECT_EQ(dev->attend_copies().appended_tokens, 6);
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
}  // namespace ckv
