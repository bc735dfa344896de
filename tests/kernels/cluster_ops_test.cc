// Fast k-means (KMeansBatch) against ref::KMeans: identical assignments,
// cluster counts and iteration counts on random inputs of odd sizes, for
// every metric, key dtype and kernel set; plus the contract's properties
// checked by brute force (centroid = mean of members, sizes, empty
// clusters dropped, determinism, max_iters, convergence on separated data).
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ref/kmeans_contract.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::AvailableKernelSets;
using testing::Encode;
using testing::RandomFloats;
using testing::ScopedKernels;

constexpr ClusterMetric kMetrics[] = {
    ClusterMetric::kCosine, ClusterMetric::kL2, ClusterMetric::kInnerProduct};
constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// Keys of one problem, encoded in `dtype` with padded rows (stride dim + 1).
struct Keys {
  std::vector<float> f32;  // the values as stored (after rounding)
  std::vector<uint8_t> bytes;
  KMeansProblem p;
};

Keys MakeKeys(const std::vector<float>& values, int64_t n, int dim, DType t,
              int k, ClusterMetric m, uint64_t seed) {
  Keys keys;
  const int64_t stride = dim + 1;
  std::vector<float> padded(n * stride, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(&values[i * dim], dim, &padded[i * stride]);
  }
  keys.bytes = Encode(t, padded, n, stride);
  keys.f32.resize(n * dim);
  for (int64_t i = 0; i < n; ++i) {
    DequantizeRow(t, keys.bytes.data() + i * RowBytes(t, stride), dim,
                  &keys.f32[i * dim]);
  }
  keys.p = {keys.bytes.data(), t, stride, n, dim, k, 20, seed, m};
  return keys;
}

Keys RandomKeys(std::mt19937& rng, int64_t n, int dim, DType t, int k,
                ClusterMetric m) {
  return MakeKeys(RandomFloats(rng, n * dim), n, dim, t, k, m, rng());
}

KMeansResult Fast(const KMeansProblem& p, int threads) {
  ThreadPool pool(threads);
  KMeansResult r;
  KMeansBatch(&pool, &p, 1, &r);
  return r;
}

KMeansResult Ref(const KMeansProblem& p) {
  KMeansResult r;
  ref::KMeans(p, &r);
  return r;
}

// The output invariants, by brute force from the assignment.
void CheckInvariants(const Keys& keys, const KMeansResult& r) {
  const KMeansProblem& p = keys.p;
  ASSERT_GE(r.k, 1);
  ASSERT_LE(r.k, p.k);
  ASSERT_EQ(r.assignment.size(), size_t(p.n));
  ASSERT_EQ(r.sizes.size(), size_t(r.k));
  ASSERT_EQ(r.centroids.size(), size_t(r.k) * p.dim);
  ASSERT_GE(r.iterations, 1);
  ASSERT_LE(r.iterations, p.max_iters);
  std::vector<int32_t> count(r.k, 0);
  std::vector<double> sum(size_t(r.k) * p.dim, 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    const int c = r.assignment[i];
    ASSERT_TRUE(c >= 0 && c < r.k);
    ++count[c];
    for (int d = 0; d < p.dim; ++d)
      sum[c * p.dim + d] += keys.f32[i * p.dim + d];
  }
  for (int c = 0; c < r.k; ++c) {
    ASSERT_GE(r.sizes[c], 1);
    ASSERT_EQ(r.sizes[c], count[c]);
    for (int d = 0; d < p.dim; ++d) {
      const double mean = sum[c * p.dim + d] / count[c];
      ASSERT_NEAR(r.centroids[c * p.dim + d], mean,
                  1e-5 * std::fabs(mean) + 1e-30)
          << "c=" << c << " d=" << d;
    }
  }
}

void ExpectSame(const KMeansResult& want, const KMeansResult& got) {
  ASSERT_EQ(got.k, want.k);
  ASSERT_EQ(got.iterations, want.iterations);
  ASSERT_EQ(got.converged, want.converged);
  ASSERT_EQ(got.sizes, want.sizes);
  ASSERT_EQ(got.assignment, want.assignment);
  ASSERT_EQ(got.centroids.size(), want.centroids.size());
  for (size_t i = 0; i < want.centroids.size(); ++i) {
    ASSERT_NEAR(got.centroids[i], want.centroids[i],
                1e-5 * std::fabs(want.centroids[i]) + 1e-30);
  }
}

// Every kernel set, 1 and 2 threads, against a reference result.
void ExpectFastMatches(const Keys& keys, const KMeansResult& want) {
  for (const KernelSet* ks : AvailableKernelSets()) {
    ScopedKernels scoped(ks);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << ks->name << " threads=" << threads);
      ExpectSame(want, Fast(keys.p, threads));
    }
  }
}

std::string Describe(const KMeansProblem& p) {
  return ::testing::PrintToString(p.n) + "x" + std::to_string(p.dim) +
         " k=" + std::to_string(p.k) +
         " metric=" + std::to_string(static_cast<int>(p.metric)) + " " +
         DTypeName(p.dtype);
}

TEST(KMeansTest, FastEqualsRefOnRandomKeys) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 2, 79, 81, 1000, 4097}) {
    for (int dim : {3, 64, 128}) {
      for (ClusterMetric m : kMetrics) {
        for (DType t : kTypes) {
          if (n == 4097 && dim == 64 && t != DType::kF16) continue;  // time
          const int k = static_cast<int>((n + 79) / 80);
          for (int kk : {k, static_cast<int>(std::min<int64_t>(n, 7))}) {
            const Keys keys = RandomKeys(rng, n, dim, t, kk, m);
            SCOPED_TRACE(Describe(keys.p));
            const KMeansResult want = Ref(keys.p);
            CheckInvariants(keys, want);
            ExpectFastMatches(keys, want);
          }
        }
      }
    }
  }
}

// Keys drawn around a few centres (closer to real keys than uniform noise),
// many clusters, so near-ties between centroids are common.
TEST(KMeansTest, FastEqualsRefOnClusteredKeysAndManyClusters) {
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (ClusterMetric m : kMetrics) {
    for (DType t : kTypes) {
      const int64_t n = 2000;
      const int dim = 64;
      std::vector<float> centres = RandomFloats(rng, 8 * dim, -2, 2);
      std::vector<float> v(n * dim);
      for (int64_t i = 0; i < n; ++i) {
        const int c = static_cast<int>(rng() % 8);
        for (int d = 0; d < dim; ++d) {
          v[i * dim + d] = centres[c * dim + d] + 0.3f * g(rng);
        }
      }
      const Keys keys = MakeKeys(v, n, dim, t, 97, m, 5);
      SCOPED_TRACE(Describe(keys.p));
      const KMeansResult want = Ref(keys.p);
      CheckInvariants(keys, want);
      ExpectFastMatches(keys, want);
      // The equality above covered skipped keys: after the first iteration
      // the fast path scores only keys whose cluster may change (cosine and
      // inner product; on these keys cosine skips some).
      EXPECT_EQ(want.key_scorings, n * want.iterations);
      const KMeansResult fast = Fast(keys.p, 1);
      EXPECT_GE(fast.key_scorings, n);  // the first iteration scores all
      if (m == ClusterMetric::kL2) {
        EXPECT_EQ(fast.key_scorings, want.key_scorings);
      } else if (m == ClusterMetric::kCosine) {
        EXPECT_LT(fast.key_scorings, want.key_scorings);
      }
    }
  }
}

TEST(KMeansTest, BatchMatchesRefAcrossAndWithinProblems) {
  std::mt19937 rng(3);
  std::vector<Keys> keys;
  for (int i = 0; i < 7; ++i) {
    keys.push_back(RandomKeys(rng, 100 + 150 * i, 32 + i, kTypes[i % 3], 3 + i,
                              kMetrics[i % 3]));
  }
  std::vector<KMeansProblem> problems;
  for (const Keys& k : keys) problems.push_back(k.p);
  for (const KernelSet* ks : AvailableKernelSets()) {
    ScopedKernels scoped(ks);
    for (int threads : {1, 2, 3}) {
      for (int count : {1, 7}) {  // 7 >= 2 * threads: across problems
        ThreadPool pool(threads);
        std::vector<KMeansResult> got(count);
        KMeansBatch(&pool, problems.data(), count, got.data());
        for (int i = 0; i < count; ++i) {
          SCOPED_TRACE(::testing::Message()
                       << ks->name << " threads=" << threads << " i=" << i);
          ExpectSame(Ref(problems[i]), got[i]);
        }
      }
    }
  }
  KMeansBatch(nullptr, problems.data(), 2, std::vector<KMeansResult>(2).data());
}

TEST(KMeansTest, DeterministicPerSeed) {
  std::mt19937 rng(4);
  Keys keys =
      RandomKeys(rng, 1500, 64, DType::kF16, 19, ClusterMetric::kCosine);
  const KMeansResult a = Fast(keys.p, 2);
  ExpectSame(a, Fast(keys.p, 2));
  ExpectSame(a, Fast(keys.p, 1));
  EXPECT_EQ(a.centroids, Fast(keys.p, 1).centroids);  // bitwise
  EXPECT_EQ(ref::contract::KMeansSeeds(1500, 19, 7),
            ref::contract::KMeansSeeds(1500, 19, 7));
  EXPECT_NE(ref::contract::KMeansSeeds(1500, 19, 7),
            ref::contract::KMeansSeeds(1500, 19, 8));
  keys.p.seed += 1;
  EXPECT_NE(a.assignment, Fast(keys.p, 2).assignment);
  const std::vector<int64_t> s = ref::contract::KMeansSeeds(100, 100, 9);
  EXPECT_EQ(std::set<int64_t>(s.begin(), s.end()).size(), 100u);  // distinct
}

TEST(KMeansTest, RecoversSeparatedClustersWithCosine) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int dim = 64, true_k = 5;
  const int64_t n = 500;
  std::vector<float> dirs(true_k * dim), v(n * dim);
  for (float& x : dirs) x = g(rng);
  std::vector<int> truth(n);
  for (int64_t i = 0; i < n; ++i) {
    truth[i] = static_cast<int>(rng() % true_k);
    const float scale = 0.5f + 2.0f * (rng() % 100) / 100.0f;
    for (int d = 0; d < dim; ++d) {
      v[i * dim + d] = scale * (dirs[truth[i] * dim + d] + 0.05f * g(rng));
    }
  }
  // A seed whose initial centroids hit every true cluster once.
  uint64_t seed = 0;
  for (;; ++seed) {
    std::set<int> hit;
    for (int64_t i : ref::contract::KMeansSeeds(n, true_k, seed))
      hit.insert(truth[i]);
    if (static_cast<int>(hit.size()) == true_k) break;
  }
  for (DType t : kTypes) {
    const Keys keys =
        MakeKeys(v, n, dim, t, true_k, ClusterMetric::kCosine, seed);
    const KMeansResult r = Fast(keys.p, 2);
    CheckInvariants(keys, r);
    EXPECT_TRUE(r.converged);
    EXPECT_EQ(r.k, true_k);
    std::map<int, int> label;  // true -> found, must be a bijection
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = label.emplace(truth[i], r.assignment[i]);
      ASSERT_EQ(it->second, r.assignment[i]) << "key " << i;
    }
    std::set<int> found;
    for (auto& [tc, fc] : label) found.insert(fc);
    EXPECT_EQ(found.size(), size_t(true_k));
    ExpectSame(Ref(keys.p), r);
  }
}

TEST(KMeansTest, KEqualsNGivesSingletons) {
  std::mt19937 rng(6);
  for (ClusterMetric m : {ClusterMetric::kCosine, ClusterMetric::kL2}) {
    const Keys keys = RandomKeys(rng, 50, 16, DType::kF32, 50, m);
    const KMeansResult r = Fast(keys.p, 2);
    CheckInvariants(keys, r);
    EXPECT_EQ(r.k, 50);
    EXPECT_EQ(r.iterations, 2);  // the second pass changes nothing
    EXPECT_TRUE(r.converged);
    for (int32_t s : r.sizes) EXPECT_EQ(s, 1);
    ExpectSame(Ref(keys.p), r);
  }
}

// 10 copies each of two orthogonal keys and k = 3: two initial centroids
// are equal, the higher-numbered one loses every tie, stays empty and is
// dropped.
TEST(KMeansTest, EmptyClustersAreDropped) {
  const int dim = 8;
  std::vector<float> v(20 * dim, 0.0f);
  for (int i = 0; i < 20; ++i) v[i * dim + (i % 2)] = 1.0f;
  for (ClusterMetric m : kMetrics) {
    for (uint64_t seed = 0; seed < 5; ++seed) {
      const Keys keys = MakeKeys(v, 20, dim, DType::kF16, 3, m, seed);
      const KMeansResult want = Ref(keys.p);
      CheckInvariants(keys, want);
      EXPECT_EQ(want.k, 2);
      EXPECT_EQ(want.sizes, (std::vector<int32_t>{10, 10}));
      ExpectFastMatches(keys, want);
    }
  }
}

TEST(KMeansTest, MaxItersRespected) {
  std::mt19937 rng(7);
  for (int max_iters : {1, 2, 3}) {
    Keys keys =
        RandomKeys(rng, 1000, 64, DType::kBF16, 13, ClusterMetric::kCosine);
    keys.p.max_iters = max_iters;
    const KMeansResult want = Ref(keys.p);
    EXPECT_EQ(want.iterations, max_iters);
    EXPECT_FALSE(want.converged);
    CheckInvariants(keys, want);
    ExpectFastMatches(keys, want);
  }
}

TEST(KMeansTest, ZeroKeysAndEmptyProblem) {
  // All-zero keys: every cosine score ties, everything joins cluster 0.
  std::vector<float> v(30 * 5, 0.0f);
  for (ClusterMetric m : kMetrics) {
    const Keys keys = MakeKeys(v, 30, 5, DType::kF32, 4, m, 1);
    const KMeansResult want = Ref(keys.p);
    EXPECT_EQ(want.k, 1);
    ExpectFastMatches(keys, want);
  }
  KMeansProblem empty;
  KMeansResult r;
  r.k = 9;
  KMeansBatch(nullptr, &empty, 1, &r);
  EXPECT_EQ(r.k, 0);
  EXPECT_TRUE(r.assignment.empty());
}

}  // namespace
}  // namespace ckv::kernels::cpu
