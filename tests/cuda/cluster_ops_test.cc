// CUDA cluster ops (k-means) against the CPU references of
// kernels/cpu/cluster_ops.h (selection: tests/device/selection_phases_test,
// whose CUDA case runs kernels/cuda/selection_ops.cu). Without a device
// every test reports SKIPPED.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/kmeans.h"
#include "kernels/ref/cluster.h"
#include "kernels/ref/kmeans_contract.h"
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

class CudaClusterTest : public CudaTest {
 protected:
  std::mt19937 rng_{99};
};

// Exact (double) metric score of key x against centroid mu.
double ExactScore(KMeansMetric m, const float* x, const float* mu, int dim) {
  const auto cm = static_cast<cpu::ClusterMetric>(static_cast<int>(m));
  return ref::contract::ExactScore(
      cm, x, mu, ref::contract::CentroidInvNorm(mu, dim), dim);
}

TEST_F(CudaClusterTest, AssignPicksTheBestCentroid) {
  const int probs = 3, dim = 72, k = 70;  // odd tiles: 70 = 64 + 6
  const int64_t n = 1000;
  for (const KMeansMetric m : {KMeansMetric::kCosine, KMeansMetric::kL2,
                               KMeansMetric::kInnerProduct}) {
    const auto keys = RandomFloats(rng_, probs * n * dim);
    auto cent = RandomFloats(rng_, probs * k * dim);
    std::fill_n(cent.begin() + 5 * dim, dim, 0.0f);  // a zero centroid
    const auto enc = Encode(DType::kF16, keys, probs * n, dim);
    std::vector<float> kf(keys.size());  // the F16-rounded keys
    for (int64_t r = 0; r < probs * n; ++r) {
      ref::DequantizeRow(DType::kF16, enc.data() + r * dim * 2, dim,
                         kf.data() + r * dim);
    }
    DeviceArray<uint8_t> dk(enc);
    DeviceArray<float> dc(cent);
    DeviceArray<int32_t> da(probs * n), dch(std::vector<int32_t>(probs, 0));
    KMeansBatch b{dk.get(), DType::kF16, n * dim, dim,      probs,    n,
                  dim,      k,           m,       dc.get(), da.get(), nullptr};
    DeviceArray<uint8_t> ws(KMeansWorkspaceBytes(b));
    CUDA_ASSERT_OK(
        KMeansAssign(b, nullptr, dch.get(), ws.get(), ws.size(), stream_));
    const auto got = da.Download();
    EXPECT_EQ(dch.Download(), std::vector<int32_t>(probs, 1));  // from -1
    int near_ties = 0;
    for (int p = 0; p < probs; ++p) {
      for (int64_t i = 0; i < n; ++i) {
        const float* x = &kf[(p * n + i) * dim];
        int best = 0;
        double bs = -INFINITY;
        for (int c = 0; c < k; ++c) {
          const double s = ExactScore(m, x, &cent[(p * k + c) * dim], dim);
          if (s > bs) {
            bs = s;
            best = c;
          }
        }
        const int g = got[p * n + i];
        ASSERT_TRUE(g >= 0 && g < k);
        if (g == best) continue;
        // F32 scores may swap two clusters within rounding of each other.
        const double gs = ExactScore(m, x, &cent[(p * k + g) * dim], dim);
        EXPECT_LT(bs - gs, 1e-5 * (std::fabs(bs) + 1.0)) << p << " " << i;
        ++near_ties;
      }
    }
    EXPECT_LT(near_ties, 5) << "metric " << static_cast<int>(m);
  }
}

TEST_F(CudaClusterTest, UpdateAveragesMembersAndKeepsEmptyClusters) {
  const int probs = 2, dim = 40;  // a partial 32-channel slice
  const int64_t n = 5000;
  for (const int k : {13, 800}) {  // 800 > one shared-memory chunk
    const auto keys = RandomFloats(rng_, probs * n * dim);
    const auto old = RandomFloats(rng_, probs * k * dim);
    std::vector<int32_t> asg(probs * n);
    for (auto& a : asg) a = static_cast<int32_t>(rng_() % (k - 3));  // empties
    DeviceArray<float> dk(keys), dc(old);
    DeviceArray<int32_t> da(asg), ds(probs * k);
    KMeansBatch b{
        dk.get(), DType::kF32,           n * dim,  dim,      probs,   n, dim,
        k,        KMeansMetric::kCosine, dc.get(), da.get(), ds.get()};
    CUDA_ASSERT_OK(KMeansUpdate(b, nullptr, stream_));
    std::vector<float> want = old;
    std::vector<int32_t> sizes(probs * k);
    for (int p = 0; p < probs; ++p) {
      ref::contract::UpdateCentroids(&keys[p * n * dim], n, dim, &asg[p * n], k,
                                     &want[p * k * dim], &sizes[p * k]);
    }
    EXPECT_EQ(ds.Download(), sizes);
    const auto got = dc.Download();
    // F32 sums of ~n/k values vs double: ~1e-6 relative; empty clusters
    // are untouched (bit-exact).
    EXPECT_LT(MaxAbs(got, want), 1e-5) << "k=" << k;
    for (int p = 0; p < probs; ++p) {
      for (int c = k - 3; c < k; ++c) {
        for (int d = 0; d < dim; ++d) {
          ASSERT_EQ(got[(p * k + c) * dim + d], old[(p * k + c) * dim + d]);
        }
      }
    }
  }
}

// Planted, well-separated clusters whose labels make the reference's own
// seeds fall into distinct clusters: F32 and double decide every key alike,
// so the whole run must agree with ref::KMeans exactly.
TEST_F(CudaClusterTest, RunMatchesReferenceOnSeparatedClusters) {
  const int probs = 3, dim = 64, k = 9;
  const int64_t n = 2000;
  std::vector<float> keys(probs * n * dim);
  std::vector<int32_t> seeds(probs * k);
  std::vector<uint64_t> seed_of(probs);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (int p = 0; p < probs; ++p) {
    seed_of[p] = 7 + p;
    const auto s = ref::contract::KMeansSeeds(n, k, seed_of[p]);
    std::vector<int> label(n);
    for (auto& l : label) l = static_cast<int>(rng_() % k);
    for (int c = 0; c < k; ++c) label[s[c]] = c, seeds[p * k + c] = s[c];
    const auto centers = RandomFloats(rng_, k * dim);
    for (int64_t i = 0; i < n; ++i) {
      for (int d = 0; d < dim; ++d) {
        keys[(p * n + i) * dim + d] = centers[label[i] * dim + d] + noise(rng_);
      }
    }
  }
  const auto enc = Encode(DType::kBF16, keys, probs * n, dim);
  DeviceArray<uint8_t> dk(enc);
  DeviceArray<float> dc(probs * k * dim);
  DeviceArray<int32_t> da(probs * n), ds(probs * k), dseeds(seeds), dit(probs),
      dconv(probs);
  KMeansBatch b{
      dk.get(), DType::kBF16,          n * dim,  dim,      probs,   n, dim,
      k,        KMeansMetric::kCosine, dc.get(), da.get(), ds.get()};
  DeviceArray<uint8_t> ws(KMeansWorkspaceBytes(b));
  CUDA_ASSERT_OK(KMeansRun(b, dseeds.get(), 20, ws.get(), ws.size(), dit.get(),
                           dconv.get(), stream_));
  const auto asg = da.Download(), sizes = ds.Download(), its = dit.Download(),
             conv = dconv.Download();
  const auto cent = dc.Download();
  for (int p = 0; p < probs; ++p) {
    cpu::KMeansProblem prob;
    prob.keys = enc.data() + p * n * dim * 2;
    prob.dtype = DType::kBF16;
    prob.stride = dim;
    prob.n = n;
    prob.dim = dim;
    prob.k = k;
    prob.seed = seed_of[p];
    cpu::KMeansResult want;
    ref::KMeans(prob, &want);
    ASSERT_EQ(want.k, k);  // no empty cluster by construction
    EXPECT_EQ(
        std::vector<int32_t>(asg.begin() + p * n, asg.begin() + (p + 1) * n),
        want.assignment);
    EXPECT_EQ(std::vector<int32_t>(sizes.begin() + p * k,
                                   sizes.begin() + (p + 1) * k),
              want.sizes);
    EXPECT_EQ(its[p], want.iterations);
    EXPECT_EQ(conv[p] != 0, want.converged);
    const std::vector<float> got_c(cent.begin() + p * k * dim,
                                   cent.begin() + (p + 1) * k * dim);
    EXPECT_LT(MaxAbs(got_c, want.centroids), 1e-5);  // F32 vs double means
  }
}

// The index builder's job on the device: KMeansRun then KMeansCompact.
// Keys repeat 5 vectors; seeds 0..11 make clusters 5..11 copies of earlier
// ones, which lose every tie to the lower index and stay empty (the means
// of identical keys are those keys): the result keeps exactly 5 clusters,
// renumbers the assignment, and a second run gives the same bytes (no
// float atomics anywhere).
TEST_F(CudaClusterTest, KMeansJobIsDeterministicAndDropsEmptyClusters) {
  const int dim = 48, k = 12, distinct = 5;
  const int64_t n = 3000;
  const auto base = RandomFloats(rng_, distinct * dim, -2.0f, 2.0f);
  std::vector<float> keys(n * dim);
  for (int64_t i = 0; i < n; ++i) {
    std::copy(base.begin() + (i % distinct) * dim,
              base.begin() + (i % distinct + 1) * dim, keys.begin() + i * dim);
  }
  std::vector<int32_t> seeds(k);
  std::iota(seeds.begin(), seeds.end(), 0);
  const auto enc = Encode(DType::kF16, keys, n, dim);
  DeviceArray<uint8_t> dk(enc);
  DeviceArray<int32_t> dseeds(seeds), dit(1), remap(k);
  const device::KMeansLayout l = device::KMeansResultLayout(n, k, dim);
  std::vector<std::vector<uint8_t>> results;
  for (int run = 0; run < 2; ++run) {
    DeviceArray<float> dc(k * dim);
    DeviceArray<int32_t> da(n), ds(k);
    KMeansBatch b{
        dk.get(), DType::kF16,           0,        dim,      1,       n, dim,
        k,        KMeansMetric::kCosine, dc.get(), da.get(), ds.get()};
    DeviceArray<uint8_t> ws(KMeansWorkspaceBytes(b)), out(l.bytes);
    CUDA_ASSERT_OK(KMeansRun(b, dseeds.get(), 20, ws.get(), ws.size(),
                             dit.get(), nullptr, stream_));
    CUDA_ASSERT_OK(
        KMeansCompact(b, dit.get(), remap.get(), out.get(), stream_));
    results.push_back(out.Download());
  }
  EXPECT_EQ(results[0], results[1]);
  const uint8_t* r = results[0].data();
  device::KMeansHeader h;
  std::memcpy(&h, r, sizeof(h));
  ASSERT_EQ(h.k, distinct);
  EXPECT_GE(h.iterations, 1);
  EXPECT_EQ(h.key_scorings, n * h.iterations);
  const auto* asg = reinterpret_cast<const int32_t*>(r + l.assignment);
  const auto* sizes = reinterpret_cast<const int32_t*>(r + l.sizes);
  std::vector<int64_t> counted(h.k, 0);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(asg[i], 0);
    ASSERT_LT(asg[i], h.k);
    ++counted[asg[i]];
  }
  for (int c = 0; c < h.k; ++c) {
    EXPECT_GT(sizes[c], 0);
    EXPECT_EQ(sizes[c], counted[c]) << c;
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(asg[i], i % distinct) << i;
}

}  // namespace
}  // namespace ckv::kernels::cuda
