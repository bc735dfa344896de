// Scalar reference of the clustered-KV ops (kernels/ref/cluster.h), double
// accumulation, plus the contract pieces shared with the fast path
// (kmeans_contract.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ref/cluster.h"
#include "kernels/ref/kmeans_contract.h"

namespace ckv::kernels::ref {
namespace contract {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> KMeansSeeds(int64_t n, int k, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  const int64_t m = std::min<int64_t>(k, n);
  uint64_t state = seed;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t j =
        i + static_cast<int64_t>(SplitMix64(&state) % uint64_t(n - i));
    std::swap(perm[i], perm[j]);
  }
  perm.resize(m);
  return perm;
}

double CentroidInvNorm(const float* mu, int dim) {
  double ss = 0.0;
  for (int d = 0; d < dim; ++d) ss += double{mu[d]} * mu[d];
  return ss > 0.0 ? 1.0 / std::sqrt(ss) : 0.0;
}

double ExactScore(ClusterMetric m, const float* key, const float* mu,
                  double inv_norm, int dim) {
  double a[4] = {0.0, 0.0, 0.0, 0.0};
  int d = 0;
  if (m == ClusterMetric::kL2) {
    for (; d + 4 <= dim; d += 4) {
      for (int j = 0; j < 4; ++j) {
        const double diff = double{key[d + j]} - mu[d + j];
        a[j] += diff * diff;
      }
    }
    for (; d < dim; ++d) {
      const double diff = double{key[d]} - mu[d];
      a[0] += diff * diff;
    }
    return -((a[0] + a[1]) + (a[2] + a[3]));
  }
  for (; d + 4 <= dim; d += 4) {
    for (int j = 0; j < 4; ++j) a[j] += double{key[d + j]} * mu[d + j];
  }
  for (; d < dim; ++d) a[0] += double{key[d]} * mu[d];
  const double dot = (a[0] + a[1]) + (a[2] + a[3]);
  return m == ClusterMetric::kCosine ? dot * inv_norm : dot;
}

void UpdateCentroids(const float* keys, int64_t n, int dim,
                     const int32_t* assignment, int k, float* centroids,
                     int32_t* sizes) {
  std::vector<double> sum(int64_t{k} * dim, 0.0);
  std::fill(sizes, sizes + k, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int c = assignment[i];
    ++sizes[c];
    double* s = sum.data() + int64_t{c} * dim;
    const float* x = keys + i * dim;
    for (int d = 0; d < dim; ++d) s[d] += x[d];
  }
  for (int c = 0; c < k; ++c) {
    if (sizes[c] == 0) continue;
    for (int d = 0; d < dim; ++d) {
      centroids[int64_t{c} * dim + d] =
          static_cast<float>(sum[int64_t{c} * dim + d] / sizes[c]);
    }
  }
}

void FinishKMeans(int k, int dim, const std::vector<float>& centroids,
                  const std::vector<int32_t>& sizes,
                  const std::vector<int32_t>& assignment, KMeansResult* out) {
  std::vector<int32_t> renumber(k, -1);
  out->k = 0;
  out->centroids.clear();
  out->sizes.clear();
  for (int c = 0; c < k; ++c) {
    if (sizes[c] == 0) continue;
    renumber[c] = out->k++;
    out->sizes.push_back(sizes[c]);
    out->centroids.insert(out->centroids.end(),
                          centroids.begin() + int64_t{c} * dim,
                          centroids.begin() + int64_t{c + 1} * dim);
  }
  out->assignment.resize(assignment.size());
  for (size_t i = 0; i < assignment.size(); ++i) {
    out->assignment[i] = renumber[assignment[i]];
  }
}

}  // namespace contract

namespace {

float ElementF32(DType t, const void* row, int64_t i) {
  switch (t) {
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(row)[i]);
    case DType::kBF16:
      return BF16ToF32(static_cast<const uint16_t*>(row)[i]);
    default:
      return static_cast<const float*>(row)[i];
  }
}

// Row i of n rows of `dim` elements at base + i * stride elements, in F32.
std::vector<float> RowsToF32(const void* base, DType t, int64_t stride,
                             int64_t n, int dim) {
  std::vector<float> out(n * dim);
  const int64_t row_bytes = RowBytes(t, stride);
  for (int64_t i = 0; i < n; ++i) {
    const char* row = static_cast<const char*>(base) + i * row_bytes;
    for (int d = 0; d < dim; ++d) out[i * dim + d] = ElementF32(t, row, d);
  }
  return out;
}

// One assignment pass; returns whether any key changed cluster.
bool AssignAll(const KMeansProblem& p, const std::vector<float>& keys, int k,
               const std::vector<float>& centroids,
               std::vector<int32_t>* assignment) {
  std::vector<double> inv(k);
  for (int c = 0; c < k; ++c) {
    inv[c] = contract::CentroidInvNorm(&centroids[int64_t{c} * p.dim], p.dim);
  }
  bool changed = false;
  for (int64_t i = 0; i < p.n; ++i) {
    double best = -INFINITY;
    int32_t arg = 0;
    for (int c = 0; c < k; ++c) {
      const double s =
          contract::ExactScore(p.metric, &keys[i * p.dim],
                               &centroids[int64_t{c} * p.dim], inv[c], p.dim);
      if (s > best) {  // strict: ties keep the lowest index
        best = s;
        arg = c;
      }
    }
    changed |= (*assignment)[i] != arg;
    (*assignment)[i] = arg;
  }
  return changed;
}

}  // namespace

void KMeans(const KMeansProblem& p, KMeansResult* out) {
  *out = KMeansResult{};
  if (p.n <= 0 || p.dim <= 0) return;
  const int k = static_cast<int>(std::clamp<int64_t>(p.k, 1, p.n));
  const std::vector<float> keys =
      RowsToF32(p.keys, p.dtype, p.stride, p.n, p.dim);
  std::vector<float> centroids(int64_t{k} * p.dim);
  const std::vector<int64_t> seeds = contract::KMeansSeeds(p.n, k, p.seed);
  for (int c = 0; c < k; ++c) {
    std::copy_n(&keys[seeds[c] * p.dim], p.dim, &centroids[int64_t{c} * p.dim]);
  }
  std::vector<int32_t> assignment(p.n, -1), sizes(k, 0);
  for (int it = 1; it <= std::max(1, p.max_iters); ++it) {
    const bool changed = AssignAll(p, keys, k, centroids, &assignment);
    out->key_scorings += p.n;
    contract::UpdateCentroids(keys.data(), p.n, p.dim, assignment.data(), k,
                              centroids.data(), sizes.data());
    out->iterations = it;
    if (!changed) {
      out->converged = true;
      break;
    }
  }
  contract::FinishKMeans(k, p.dim, centroids, sizes, assignment, out);
}

void CentroidScores(const float* q, const float* centroids, int64_t n, int dim,
                    float* scores) {
  for (int64_t c = 0; c < n; ++c) {
    double acc = 0.0;
    for (int d = 0; d < dim; ++d) acc += double{q[d]} * centroids[c * dim + d];
    scores[c] = static_cast<float>(acc);
  }
}

void CentroidScoresMulti(const float* qs, int n_q, const float* centroids,
                         int64_t n, int dim, float* scores, int64_t ld) {
  for (int j = 0; j < n_q; ++j) {
    CentroidScores(qs + int64_t{j} * dim, centroids, n, dim, scores + j * ld);
  }
}

void QuestPageBounds(const void* keys, DType dtype, int64_t stride, int64_t n,
                     int dim, int page_size, float* page_min, float* page_max) {
  const std::vector<float> rows = RowsToF32(keys, dtype, stride, n, dim);
  for (int64_t p = 0; p * page_size < n; ++p) {
    const int64_t end = std::min<int64_t>(n, (p + 1) * page_size);
    for (int d = 0; d < dim; ++d) {
      float lo = INFINITY, hi = -INFINITY;
      for (int64_t i = p * page_size; i < end; ++i) {
        lo = std::min(lo, rows[i * dim + d]);
        hi = std::max(hi, rows[i * dim + d]);
      }
      page_min[p * dim + d] = lo;
      page_max[p * dim + d] = hi;
    }
  }
}

void QuestScores(const float* q, const float* page_min, const float* page_max,
                 int64_t n_pages, int dim, float* scores) {
  for (int64_t p = 0; p < n_pages; ++p) {
    double acc = 0.0;
    for (int d = 0; d < dim; ++d) {
      acc += std::max(double{q[d]} * page_max[p * dim + d],
                      double{q[d]} * page_min[p * dim + d]);
    }
    scores[p] = static_cast<float>(acc);
  }
}

void KeyScores(const float* qs, int n_q, const void* keys, DType dtype,
               int64_t stride, const int32_t* rows, int64_t n, int dim,
               float* scores, int64_t ld) {
  const int64_t row_bytes = RowBytes(dtype, stride);
  for (int64_t i = 0; i < n; ++i) {
    const char* row = static_cast<const char*>(keys) +
                      (rows != nullptr ? rows[i] : i) * row_bytes;
    for (int j = 0; j < n_q; ++j) {
      double acc = 0.0;
      for (int d = 0; d < dim; ++d) {
        acc += double{qs[int64_t{j} * dim + d]} * ElementF32(dtype, row, d);
      }
      scores[j * ld + i] = static_cast<float>(acc);
    }
  }
}

}  // namespace ckv::kernels::ref
