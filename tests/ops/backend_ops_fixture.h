// The fixture of the one op suite every backend runs (backend_ops_test.cc,
// backend_attention_test.cc; the suite and its tolerances are described in
// backend_ops_test.cc): the backends, a fresh backend per case, host data
// kept for the test's life, and the reference attention.
#pragma once

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

namespace ckv::backend_ops {

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

// CUDA's tensor-core prefill attention (kernels/cuda/attention_tiles.h):
// Q and P split into two 16-bit parts leave about 2^-17 (BF16) and 2^-21
// (F16) of |q||k| in each score and of each weight; over these tests'
// sizes (|q| <= 2, |k|, |v| <= 1, head_dim <= 80, <= 187 keys) at most
// ~3e-5 in a row's output, F32 accumulation order aside.
inline constexpr double kTileAttentionTolerance = 1e-4;

inline std::vector<BackendCase> AllBackends() {
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
inline AttentionSpec SpecOf(int n_heads, int head_dim) {
  AttentionSpec spec;
  spec.n_heads = n_heads;
  spec.head_dim = head_dim;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return spec;
}

inline bool StoredAsIs(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

inline const DType kAllTypes[] = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,   DType::kQ3_K,
    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// An odd row length that type t can store (a multiple of its block).
inline int64_t OddCols(DType t, int variant) {
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

// x with each value rounded to F16 or BF16 and back (what a cache of
// that dtype holds).
inline std::vector<float> RoundedTo(DType dt, std::vector<float> x) {
  for (float& f : x) {
    f = dt == DType::kF16 ? kernels::F16ToF32(kernels::F32ToF16(f))
                          : kernels::BF16ToF32(kernels::F32ToBF16(f));
  }
  return x;
}

inline std::vector<int64_t> Positions(int64_t n, int64_t first = 0) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

// ref::Attention of q's rows [row, row + n_q) (positions pos[row..]) over
// one sequence's F32 K/V rows [n_rows][n_kv * head_dim] (query head h reads
// KV head h / (n_heads / n_kv)), into the same rows of *want.
inline void RefAttend(const AttentionSpec& spec, int n_kv,
                      const std::vector<float>& q,
                      const std::vector<int64_t>& pos,
                      const std::vector<float>& ks,
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

}  // namespace ckv::backend_ops
