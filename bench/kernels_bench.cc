// Microbenchmark of the CPU kernels at the shapes of the target model
// (d=512, 8 heads / 2 KV heads, head_dim 64, ffn 1536, vocab 128256).
// Prints the kernel set, then best-of-N times: GEMV GB/s, GEMM GFLOP/s,
// attention GB/s (decode) and GFLOP/s (prefill), at 1 and 2 threads;
// centroid scores (one thread) against the scalar reference.
// Usage: kernels_bench [reps] [threads (default: 1 then 2)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/thread_pool.h"

namespace ckv::kernels::cpu {
namespace {

int g_reps = 5;

double BestSeconds(const std::function<void()>& fn) {
  fn();  // warm-up
  double best = 1e30;
  for (int i = 0; i < g_reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

std::vector<uint8_t> RandomBytes(size_t n, DType t) {
  std::mt19937 rng(7);
  std::vector<uint8_t> b(n);
  if (t == DType::kF16 || t == DType::kBF16) {
    auto* h = reinterpret_cast<uint16_t*>(b.data());
    std::uniform_real_distribution<float> d(-1, 1);
    for (size_t i = 0; i < n / 2; ++i) {
      h[i] = t == DType::kF16 ? F32ToF16(d(rng)) : F32ToBF16(d(rng));
    }
  } else if (t == DType::kF32) {
    auto* f = reinterpret_cast<float*>(b.data());
    std::uniform_real_distribution<float> d(-1, 1);
    for (size_t i = 0; i < n / 4; ++i) f[i] = d(rng);
  } else if (t != DType::kQ8_0) {  // other block types: quantised floats
    std::uniform_real_distribution<float> d(-1, 1);
    const int64_t bs = BlockSize(t);
    std::vector<float> f(bs * 64);
    const int64_t chunk = RowBytes(t, bs * 64);
    for (size_t off = 0; off + chunk <= n; off += chunk) {
      for (float& v : f) v = d(rng);
      QuantizeRow(t, f.data(), bs * 64, b.data() + off);
    }
  } else {
    auto* q = reinterpret_cast<BlockQ8_0*>(b.data());
    for (size_t i = 0; i < n / sizeof(BlockQ8_0); ++i) {
      q[i].d = F32ToF16(0.01f);
      for (auto& v : q[i].qs) v = static_cast<int8_t>(rng() % 255 - 127);
    }
  }
  return b;
}

void BenchGemv(ThreadPool* pool, int threads) {
  const int64_t n_in = 512, n_out = 128256;
  for (DType t :
       {DType::kF16, DType::kQ8_0, DType::kBF16, DType::kF32, DType::kQ4_0,
        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
    const int64_t bytes = RowBytes(t, n_in) * n_out;
    const auto w = RandomBytes(bytes, t);
    std::vector<float> x(n_in, 0.5f), y(n_out);
    const double s = BestSeconds(
        [&] { MatMul(pool, t, w.data(), n_in, n_out, x.data(), 1, y.data()); });
    std::printf("gemv  %-6s 128256x512  threads=%d  %7.2f ms  %6.2f GB/s\n",
                DTypeName(t), threads, s * 1e3, bytes / s / 1e9);
  }
}

void BenchGemm(ThreadPool* pool, int threads) {
  struct Shape {
    int64_t n_in, n_out, n_tokens;
  };
  for (Shape sh : {Shape{512, 1536, 64}, Shape{512, 1536, 512},
                   Shape{1536, 512, 512}, Shape{512, 512, 128}}) {
    const auto w =
        RandomBytes(RowBytes(DType::kF16, sh.n_in) * sh.n_out, DType::kF16);
    std::vector<float> x(sh.n_in * sh.n_tokens, 0.5f);
    std::vector<float> y(sh.n_out * sh.n_tokens);
    const double s = BestSeconds([&] {
      MatMul(pool, DType::kF16, w.data(), sh.n_in, sh.n_out, x.data(),
             sh.n_tokens, y.data());
    });
    const double flop = 2.0 * sh.n_in * sh.n_out * sh.n_tokens;
    std::printf(
        "gemm  F16  %4ldx%-4ld tokens=%-4ld threads=%d  %7.2f ms  "
        "%6.1f GFLOP/s\n",
        static_cast<long>(sh.n_out), static_cast<long>(sh.n_in),
        static_cast<long>(sh.n_tokens), threads, s * 1e3, flop / s / 1e9);
  }
}

// One query head's scores against the centroids of a 128k context at 80
// keys per cluster (head_dim 32: the trained demo model; 128: the engine
// geometry at 32k), fast kernel vs the scalar reference in the same run.
void BenchCentroidScores() {
  struct Shape {
    int dim;
    int64_t n;
  };
  for (Shape sh : {Shape{32, 1638}, Shape{128, 410}, Shape{128, 1638}}) {
    std::vector<float> mu(sh.n * sh.dim), q(sh.dim), scores(sh.n);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& v : mu) v = d(rng);
    for (float& v : q) v = d(rng);
    std::vector<uint16_t> panels;
    PackCentroidPanels(mu.data(), sh.n, sh.dim, &panels);
    const double fast = BestSeconds([&] {
      CentroidScores(q.data(), panels.data(), sh.n, sh.dim, scores.data());
    });
    const double ref = BestSeconds([&] {
      ref::CentroidScores(q.data(), mu.data(), sh.n, sh.dim, scores.data());
    });
    // A GQA group of 4 query heads in one pass (clusterkv's PlanEach).
    std::vector<float> q4(4 * sh.dim), scores4(4 * sh.n);
    for (float& v : q4) v = d(rng);
    const double fast4 = BestSeconds([&] {
      CentroidScoresMulti(q4.data(), 4, panels.data(), sh.n, sh.dim,
                          scores4.data(), sh.n);
    });
    std::printf(
        "centroid scores dim=%-3d n=%-5ld  %7.2f us (%5.2f ns/centroid)  "
        "ref %7.2f us  ref/fast %.2fx  4 queries %7.2f us\n",
        sh.dim, static_cast<long>(sh.n), fast * 1e6, fast * 1e9 / sh.n,
        ref * 1e6, ref / fast, fast4 * 1e6);
  }
}

// One contiguous span of n_ctx random K/V rows per KV head; the bytes are
// kept in `storage`.
std::vector<KvSpan> RandomKv(DType t, int n_kv, int hd, int64_t n_ctx,
                             std::vector<std::vector<uint8_t>>* storage) {
  const int64_t rb = RowBytes(t, hd);
  std::vector<KvSpan> spans(n_kv);
  for (int h = 0; h < n_kv; ++h) {
    storage->push_back(RandomBytes(rb * n_ctx, t));
    const void* k = storage->back().data();
    storage->push_back(RandomBytes(rb * n_ctx, t));
    spans[h] = KvSpan{k, storage->back().data(), t, hd, n_ctx, 0, nullptr};
  }
  return spans;
}

// 8 query heads over 2 KV heads (head_dim 64), contiguous K/V per KV head.
void BenchAttention(ThreadPool* pool, int threads, DType t, int64_t n_ctx,
                    int n_q) {
  const int n_heads = 8, n_kv = 2, hd = 64;
  const int64_t rb = RowBytes(t, hd);
  std::vector<std::vector<uint8_t>> storage;
  const std::vector<KvSpan> spans = RandomKv(t, n_kv, hd, n_ctx, &storage);
  std::vector<KvSpanList> lists(n_heads);
  for (int h = 0; h < n_heads; ++h) lists[h] = {&spans[h / 4], 1};
  std::vector<float> q(int64_t{n_q} * n_heads * hd, 0.1f);
  std::vector<float> out(q.size());
  std::vector<int64_t> qpos(n_q);
  for (int i = 0; i < n_q; ++i) qpos[i] = n_ctx - n_q + i;
  AttentionArgs a{q.data(), qpos.data(), n_q,          n_heads,
                  hd,       0.125f,      lists.data(), out.data()};
  const double s = BestSeconds([&] { Attention(pool, a); });
  if (n_q == 1) {
    const double bytes = 2.0 * n_kv * rb * n_ctx;
    std::printf("attn decode %-4s ctx=%-6ld threads=%d  %7.3f ms  %6.2f GB/s\n",
                DTypeName(t), static_cast<long>(n_ctx), threads, s * 1e3,
                bytes / s / 1e9);
  } else {
    // Visible keys per query summed over queries (causal).
    double keys = 0;
    for (int i = 0; i < n_q; ++i) keys += qpos[i] + 1;
    const double flop = 4.0 * keys * n_heads * hd;
    std::printf(
        "attn prefill %-4s ctx=%-6ld n_q=%d threads=%d  %8.2f ms  "
        "%6.1f GFLOP/s\n",
        DTypeName(t), static_cast<long>(n_ctx), n_q, threads, s * 1e3,
        flop / s / 1e9);
  }
}

// One decode step of one layer in the engine geometry (32 query heads over
// 8 KV heads, head_dim 128, F16) at a 32k context: dense (every row, the 4
// heads of a group share their spans) vs sparse per query head (each head
// its own 1,024 rows: 13 runs of ~80 consecutive rows at random places, as
// clusters stored by cluster are). Bytes: K+V rows read.
void BenchSparseDecode(ThreadPool* pool, int threads) {
  const int n_heads = 32, n_kv = 8, hd = 128, group = n_heads / n_kv;
  const int64_t n_ctx = 32768, run = 80, runs = 13;
  const DType t = DType::kF16;
  const int64_t rb = RowBytes(t, hd);
  std::vector<std::vector<uint8_t>> storage;
  const std::vector<KvSpan> dense = RandomKv(t, n_kv, hd, n_ctx, &storage);
  // 4 selections (68 MB of rows in all, more than the L3), used in turn,
  // so that a step does not find the previous step's rows in the cache.
  constexpr int kSets = 4;
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> rows(kSets * n_heads);
  std::vector<KvSpan> sparse(kSets * n_heads);
  for (int i = 0; i < kSets * n_heads; ++i) {
    for (int64_t r = 0; r < runs; ++r) {
      const int64_t first = rng() % (n_ctx - run);
      for (int64_t j = 0; j < run; ++j) {
        rows[i].push_back(static_cast<int32_t>(first + j));
      }
    }
    sparse[i] = dense[(i % n_heads) / group];
    sparse[i].count = static_cast<int64_t>(rows[i].size());
    sparse[i].rows = rows[i].data();
  }
  std::vector<KvSpanList> dense_lists(n_heads), sparse_lists(kSets * n_heads);
  for (int h = 0; h < n_heads; ++h) dense_lists[h] = {&dense[h / group], 1};
  for (int i = 0; i < kSets * n_heads; ++i) sparse_lists[i] = {&sparse[i], 1};
  std::vector<float> q(n_heads * hd, 0.1f), out(q.size());
  const int64_t qpos = n_ctx;
  AttentionArgs a{q.data(), &qpos, 1, n_heads, hd, 0.088f, nullptr, out.data()};
  a.kv = dense_lists.data();
  const double s_dense = BestSeconds([&] { Attention(pool, a); });
  int set = 0;
  const double s_sparse = BestSeconds([&] {
    a.kv = sparse_lists.data() + (set++ % kSets) * n_heads;
    Attention(pool, a);
  });
  const double dense_bytes = 2.0 * n_kv * rb * n_ctx;
  const double sparse_bytes = 2.0 * n_heads * rb * runs * run;
  std::printf(
      "attn sparse decode F16 hd128 32/8 ctx=32768 threads=%d  dense %7.3f "
      "ms (%5.2f GB/s)  per-head 1040 rows %6.3f ms (%5.2f GB/s)  "
      "dense/sparse %.2fx\n",
      threads, s_dense * 1e3, dense_bytes / s_dense / 1e9, s_sparse * 1e3,
      sparse_bytes / s_sparse / 1e9, s_dense / s_sparse);
}

void RunAll(int threads) {
  ThreadPool pool(threads);
  BenchGemv(&pool, threads);
  BenchGemm(&pool, threads);
  for (DType t : {DType::kF16, DType::kF32}) {
    for (int64_t ctx : {16384, 32768})
      BenchAttention(&pool, threads, t, ctx, 1);
  }
  BenchAttention(&pool, threads, DType::kF16, 4096, 512);
  BenchAttention(&pool, threads, DType::kF16, 32768, 512);
  BenchSparseDecode(&pool, threads);
}

}  // namespace
}  // namespace ckv::kernels::cpu

int main(int argc, char** argv) {
  using namespace ckv::kernels::cpu;
  if (argc > 1) g_reps = std::max(1, std::atoi(argv[1]));
  std::printf("kernel set: %s  (cpu features: %s)\n", KernelSetName(),
              DescribeCpuFeatures().c_str());
  const int only = argc > 2 ? std::atoi(argv[2]) : 0;
  BenchCentroidScores();
  for (int threads : {1, 2}) {
    if (only != 0 && only != threads) continue;
    RunAll(threads);
  }
  return 0;
}
