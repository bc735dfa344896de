// Quest page bounds and scores, and centroid scores: ref and fast against
// brute force, every kernel set, odd dims, last page shorter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/test_util.h"

namespace ckv::kernels::cpu {
namespace {

using testing::AvailableKernelSets;
using testing::Encode;
using testing::RandomFloats;
using testing::ScopedKernels;

using BoundsFn = void (*)(const void*, DType, int64_t, int64_t, int, int,
                          float*, float*);

TEST(QuestTest, PageBoundsMatchBruteForce) {
  std::mt19937 rng(21);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int dim : {3, 17, 64, 128}) {
      for (int64_t n : {1, 16, 37, 300}) {
        const int page = 16;
        const int64_t stride = dim + 5;
        const auto bytes =
            Encode(t, RandomFloats(rng, n * stride, -3, 3), n, stride);
        std::vector<float> rows(n * dim);
        for (int64_t i = 0; i < n; ++i) {
          DequantizeRow(t, bytes.data() + i * RowBytes(t, stride), dim,
                        &rows[i * dim]);
        }
        const int64_t pages = (n + page - 1) / page;
        std::vector<float> want_min(pages * dim), want_max(pages * dim);
        for (int64_t p = 0; p < pages; ++p) {
          for (int d = 0; d < dim; ++d) {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t i = p * page; i < std::min(n, (p + 1) * page); ++i) {
              lo = std::min(lo, rows[i * dim + d]);
              hi = std::max(hi, rows[i * dim + d]);
            }
            want_min[p * dim + d] = lo;
            want_max[p * dim + d] = hi;
          }
        }
        auto check = [&](BoundsFn fn, const char* what) {
          std::vector<float> mn(pages * dim, NAN), mx(pages * dim, NAN);
          fn(bytes.data(), t, stride, n, dim, page, mn.data(), mx.data());
          EXPECT_EQ(mn, want_min) << what << " n=" << n << " dim=" << dim;
          EXPECT_EQ(mx, want_max) << what << " n=" << n << " dim=" << dim;
        };
        check(ref::QuestPageBounds, "ref");
        for (const KernelSet* ks : AvailableKernelSets()) {
          ScopedKernels scoped(ks);
          check(QuestPageBounds, ks->name);
        }
      }
    }
  }
}

TEST(QuestTest, ScoresMatchBruteForce) {
  std::mt19937 rng(22);
  for (int dim : {3, 17, 64, 128}) {
    for (int64_t pages : {1, 3, 4, 5, 131}) {
      const auto q = RandomFloats(rng, dim, -2, 2);
      auto mn = RandomFloats(rng, pages * dim, -1, 1);
      auto mx = RandomFloats(rng, pages * dim, -1, 1);
      for (int64_t i = 0; i < pages * dim; ++i) {
        if (mn[i] > mx[i]) std::swap(mn[i], mx[i]);
      }
      std::vector<double> want(pages), mag(pages, 0.0);
      for (int64_t p = 0; p < pages; ++p) {
        double acc = 0.0;
        for (int d = 0; d < dim; ++d) {
          const double a = double{q[d]} * mx[p * dim + d];
          const double b = double{q[d]} * mn[p * dim + d];
          acc += std::max(a, b);
          mag[p] += std::fabs(a) + std::fabs(b);
        }
        want[p] = acc;
      }
      std::vector<float> got(pages, NAN);
      ref::QuestScores(q.data(), mn.data(), mx.data(), pages, dim, got.data());
      for (int64_t p = 0; p < pages; ++p) {
        EXPECT_NEAR(got[p], want[p], 1e-6 * mag[p]);
      }
      for (const KernelSet* ks : AvailableKernelSets()) {
        ScopedKernels scoped(ks);
        std::fill(got.begin(), got.end(), NAN);
        QuestScores(q.data(), mn.data(), mx.data(), pages, dim, got.data());
        for (int64_t p = 0; p < pages; ++p) {
          EXPECT_NEAR(got[p], want[p], 1e-5 * mag[p])
              << ks->name << " p=" << p << " dim=" << dim;
        }
      }
    }
  }
}

// The order KernelSet::quest_scores defines: lane l < 16 sums the terms of
// d = l, l + 16, ... from +0 (each the vector max: a when a > b, else b),
// then the lanes fold in halves.
float QuestContract(const float* q, const float* mn, const float* mx, int dim) {
  float lane[16] = {};
  for (int d = 0; d < dim; ++d) {
    const float a = q[d] * mx[d], b = q[d] * mn[d];
    lane[d % 16] += a > b ? a : b;
  }
  for (int half = 8; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) lane[l] += lane[l + half];
  }
  return lane[0];
}

// Every kernel set gives the contract's bits (the device planner's quest
// scores reproduce them), ±inf, NaN and zero bounds included.
TEST(QuestTest, ScoresAreTheContractBitsInEveryKernelSet) {
  std::mt19937 rng(29);
  for (int dim : {1, 3, 8, 15, 16, 17, 31, 64, 67, 128}) {
    const int64_t pages = 9;
    auto q = RandomFloats(rng, dim, -2, 2);
    auto mn = RandomFloats(rng, pages * dim, -1, 1);
    auto mx = RandomFloats(rng, pages * dim, -1, 1);
    for (int64_t i = 0; i < pages * dim; ++i) {
      if (mn[i] > mx[i]) std::swap(mn[i], mx[i]);
    }
    mx[1 * dim] = INFINITY;  // page 1: +inf or -inf by q's sign
    mn[2 * dim + dim / 2] = NAN;
    std::fill_n(mn.begin() + 3 * dim, dim, 0.0f);  // page 3: every term 0
    std::fill_n(mx.begin() + 3 * dim, dim, -0.0f);
    q[dim - 1] = 0.0f;  // 0 * inf: NaN on page 1's last element if dim 1
    for (const KernelSet* ks : AvailableKernelSets()) {
      ScopedKernels scoped(ks);
      std::vector<float> got(pages, 1.0f);
      QuestScores(q.data(), mn.data(), mx.data(), pages, dim, got.data());
      for (int64_t p = 0; p < pages; ++p) {
        const float want = QuestContract(q.data(), mn.data() + p * dim,
                                         mx.data() + p * dim, dim);
        uint32_t a, b;
        std::memcpy(&a, &got[p], 4);
        std::memcpy(&b, &want, 4);
        EXPECT_TRUE(a == b || (std::isnan(got[p]) && std::isnan(want)))
            << ks->name << " dim " << dim << " page " << p << ": " << got[p]
            << " != " << want;
      }
    }
  }
}

// The score KernelSet::centroid_scores defines: an FMA chain over d.
float FmaChain(const float* q, const float* c, int dim) {
  float acc = 0.0f;
  for (int d = 0; d < dim; ++d) acc = std::fma(q[d], c[d], acc);
  return acc;
}

// The centroids as the panels hold them: each element through F16.
std::vector<float> RoundedToF16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = F16ToF32(F32ToF16(x[i]));
  return out;
}

// Packing rounds to nearest F16, saturates what F16 cannot hold at +-65504
// (a finite centroid keeps finite scores) and keeps NaN.
TEST(CentroidScoresTest, PanelsRoundAndSaturate) {
  const std::vector<float> mu = {1.0f,  1.0f + 1.0f / 4096, 3e-6f, -70000.0f,
                                 1e30f, 65504.0f,           NAN,   -0.0f};
  std::vector<uint16_t> panels;
  PackCentroidPanels(mu.data(), 1, static_cast<int>(mu.size()), &panels);
  ASSERT_EQ(panels.size(), kCentroidPanel * mu.size());
  const auto at = [&](int d) { return F16ToF32(panels[d * kCentroidPanel]); };
  EXPECT_EQ(at(0), 1.0f);
  EXPECT_EQ(at(1), 1.0f);  // a tie rounds to even
  EXPECT_EQ(at(2), F16ToF32(F32ToF16(3e-6f)));
  EXPECT_EQ(at(3), -65504.0f);
  EXPECT_EQ(at(4), 65504.0f);
  EXPECT_EQ(at(5), 65504.0f);
  EXPECT_TRUE(std::isnan(at(6)));
  EXPECT_EQ(at(7), 0.0f);
  for (size_t i = 1; i < kCentroidPanel; ++i) EXPECT_EQ(panels[i], 0) << i;
}

// Every table's scores from the packed panels are the FMA chain over the
// F16-rounded centroids to the bit (odd dims and counts: partial last
// panels) and near the float64 reference on those centroids.
TEST(CentroidScoresTest, FastMatchesRef) {
  std::mt19937 rng(23);
  for (int dim : {3, 64, 128}) {
    for (int64_t n : {1, 5, 17, 410}) {
      const auto q = RandomFloats(rng, dim, -2, 2);
      const auto raw = RandomFloats(rng, n * dim);
      std::vector<uint16_t> panels;
      PackCentroidPanels(raw.data(), n, dim, &panels);
      const auto mu = RoundedToF16(raw);
      ASSERT_EQ(panels.size() % (kCentroidPanel * dim), 0u);
      std::vector<float> want(n, NAN), got(n + 1, NAN);
      ref::CentroidScores(q.data(), mu.data(), n, dim, want.data());
      for (int64_t c = 0; c < n; ++c) {
        double acc = 0.0;
        for (int d = 0; d < dim; ++d) acc += double{q[d]} * mu[c * dim + d];
        EXPECT_NEAR(want[c], acc, 1e-6);
      }
      for (const KernelSet* ks : AvailableKernelSets()) {
        ScopedKernels scoped(ks);
        CentroidScores(q.data(), panels.data(), n, dim, got.data());
        for (int64_t c = 0; c < n; ++c) {
          ASSERT_EQ(got[c], FmaChain(q.data(), mu.data() + c * dim, dim))
              << ks->name << " dim=" << dim << " n=" << n << " c=" << c;
          EXPECT_NEAR(got[c], want[c], 1e-5 * dim) << ks->name;
        }
        EXPECT_TRUE(std::isnan(got[n])) << ks->name << ": wrote past n";
      }
    }
  }
}

// Several queries at once (more than kCentroidQueries: two calls) equal
// one query at a time to the bit, on every table.
TEST(CentroidScoresTest, MultiMatchesOneQueryAtATime) {
  std::mt19937 rng(29);
  for (int dim : {3, 32, 128}) {
    for (int64_t n : {1, 7, 1638}) {
      for (int n_q : {1, 2, 4, 5, 8, 11}) {
        const auto qs = RandomFloats(rng, n_q * dim, -2, 2);
        const auto raw = RandomFloats(rng, n * dim);
        std::vector<uint16_t> panels;
        PackCentroidPanels(raw.data(), n, dim, &panels);
        const auto mu = RoundedToF16(raw);
        std::vector<float> want(n_q * n, NAN), got(n_q * n, NAN);
        ref::CentroidScoresMulti(qs.data(), n_q, mu.data(), n, dim, want.data(),
                                 n);
        for (const KernelSet* ks : AvailableKernelSets()) {
          ScopedKernels scoped(ks);
          CentroidScoresMulti(qs.data(), n_q, panels.data(), n, dim, got.data(),
                              n);
          for (int j = 0; j < n_q; ++j) {
            std::vector<float> one(n, NAN);
            CentroidScores(qs.data() + j * dim, panels.data(), n, dim,
                           one.data());
            for (int64_t c = 0; c < n; ++c) {
              ASSERT_EQ(got[j * n + c], one[c])
                  << ks->name << " dim=" << dim << " n=" << n << " j=" << j;
              ASSERT_NEAR(got[j * n + c], want[j * n + c], 1e-5 * dim)
                  << ks->name;
            }
          }
        }
      }
    }
  }
}

// Exact key scores (the clusterkv_rerank policy's second stage): every
// table against brute force on the dequantised rows and against the
// reference, contiguous and gathered rows, odd dims, partial tiles, several
// queries; nothing written past n or outside the ld stride's rows.
TEST(KeyScoresTest, FastMatchesRefAndBruteForce) {
  std::mt19937 rng(37);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int dim : {3, 17, 64, 128}) {
      for (int64_t n : {1, 63, 64, 65, 300}) {
        for (int n_q : {1, 3, 5}) {
          const int64_t stride = dim + 3, total = n + 7;
          const auto bytes = Encode(t, RandomFloats(rng, total * stride, -3, 3),
                                    total, stride);
          const auto qs = RandomFloats(rng, n_q * dim, -2, 2);
          std::vector<int32_t> gather(n);
          for (int64_t i = 0; i < n; ++i) gather[i] = (i * 5 + 3) % total;
          for (const int32_t* rows :
               {static_cast<int32_t*>(nullptr), gather.data()}) {
            const int64_t ld = n + 2;
            std::vector<float> want(n_q * ld, NAN), got(n_q * ld, NAN);
            ref::KeyScores(qs.data(), n_q, bytes.data(), t, stride, rows, n,
                           dim, want.data(), ld);
            std::vector<float> row(dim);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t r = rows ? rows[i] : i;
              DequantizeRow(t, bytes.data() + r * RowBytes(t, stride), dim,
                            row.data());
              for (int j = 0; j < n_q; ++j) {
                double acc = 0.0;
                for (int d = 0; d < dim; ++d) {
                  acc += double{qs[j * dim + d]} * row[d];
                }
                ASSERT_NEAR(want[j * ld + i], acc, 1e-5 * std::abs(acc) + 1e-6);
              }
            }
            for (const KernelSet* ks : AvailableKernelSets()) {
              ScopedKernels scoped(ks);
              std::fill(got.begin(), got.end(), NAN);
              KeyScores(qs.data(), n_q, bytes.data(), t, stride, rows, n, dim,
                        got.data(), ld);
              for (int j = 0; j < n_q; ++j) {
                for (int64_t i = 0; i < n; ++i) {
                  // F32 sums of |q_d K_d| <= 6: 1e-5 * dim bounds the error.
                  ASSERT_NEAR(got[j * ld + i], want[j * ld + i], 1e-5 * dim)
                      << ks->name << " " << DTypeName(t) << " dim=" << dim
                      << " n=" << n << " q=" << j << " i=" << i
                      << (rows ? " gather" : "");
                }
                for (int64_t i = n; i < ld; ++i) {
                  ASSERT_TRUE(std::isnan(got[j * ld + i]))
                      << ks->name << ": wrote past n";
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ckv::kernels::cpu
