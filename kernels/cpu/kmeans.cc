// Fast k-means (contract in cluster_ops.h), bit-identical to ref::KMeans.
//
// Assignment: every key is scored against every centroid in F32 by the
// KernelSet's score_block (a register-tiled GEMM: kScoreRows keys x
// kScoreCols centroids; score_block_narrow, 8 centroids, when k <= 8). The F32
// scores are turned into the exact decision as follows. Let s_c be the F32
// score and t_c the exact one (the metric's value up to a per-key positive
// factor and offset); the rounding error is |s_c - t_c| <= E_i, a rigorous
// per-key bound (dot-product rounding gamma_D * |x| * max_c |y_c| plus the
// rounding of the operands, see Margin()). If the best F32 score beats the
// runner-up by more than 2 * E_i (we use twice that again), its cluster is the
// exact argmax. Else the key is settled by ref::contract::ExactScore -- the very
// function ref:: KMeans assigns with -- over every cluster whose F32 score is
// within the margin of the best, which provably contains the exact winner. Ties
// thus resolve exactly as in the reference (lowest index among equal doubles).
//
// Skipping keys whose assignment cannot change (kCosine, kInnerProduct):
// after a key's winner was decided by the F32 gap, its exact scores satisfy
// t_win >= lower and t_c <= upper for every other c (lower/upper = best /
// runner-up F32 score -/+ the per-score error bound). When the centroids
// move, the exact score of every key against centroid c moves by at most
// |x| * delta_c, delta_c = |y'_c - y_c| (y: the centroid operand in double),
// so lower -= |x| delta_win and upper += |x| max_c delta_c stay valid. A key
// with lower > upper (plus a slack far above double rounding) keeps its
// cluster as the strict exact argmax -- the reference would assign it the
// same -- and is not scored; the others are packed into blocks and scored as
// above. kL2 scores every key every iteration.
//
// Update: ref::contract::UpdateCentroids (shared with the reference): double
// sums per cluster and channel in key order, so centroids are bitwise equal.
//
// Operands of the score GEMM per metric (x: key side, y: centroid side):
//   kCosine:       x = k / |k|, y = mu / |mu|   (argmax of cos)
//   kInnerProduct: x = k, y = mu
//   kL2:           x = [k, 1], y = [mu, -|mu|^2 / 2]   (argmax <k,mu> -
//                  |mu|^2/2 = argmin |k - mu|^2)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/cluster_ops.h"
#include "kernels/cpu/kernel_set.h"
#include "kernels/ref/kmeans_contract.h"
#include "kernels/cpu/thread_pool.h"

namespace ckv::kernels::cpu {
namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // F32

class Solver {
 public:
  Solver(const KMeansProblem& p, const KernelSet& ks)
      : p_(p),
        ks_(ks),
        k_(static_cast<int>(std::clamp<int64_t>(p.k, 1, p.n))),
        dim_a_(p.dim + (p.metric == ClusterMetric::kL2 ? 1 : 0)),
        n_blocks_((p.n + kScoreRows - 1) / kScoreRows),
        width_(k_ <= kScoreColsNarrow && ks.score_block_narrow != nullptr
                   ? kScoreColsNarrow
                   : kScoreCols),
        n_panels_((k_ + width_ - 1) / width_) {}

  void Run(ThreadPool* pool, KMeansResult* out);

 private:
  void PrepareKeys();
  void PackCentroids();
  // Widens every key's bounds by how far the centroids moved since
  // prev_operand_ (the operand the bounds were made with).
  void ShiftBounds();
  // active_ = the keys whose assignment may change (every key without
  // bounds); the others keep theirs in next_. Packs the active keys' operand
  // into active_xt_ when not every key is active.
  void SelectActive();
  void AssignBlocks(int64_t b0, int64_t b1);
  double Margin(int64_t i) const;
  int32_t Settle(int64_t i, const float* s, double threshold) const;

  const KMeansProblem& p_;
  const KernelSet& ks_;
  const int k_;
  const int dim_a_;  // columns of the score GEMM
  const int64_t n_blocks_;
  const int width_;  // centroids per panel: kScoreCols or kScoreColsNarrow
  const int n_panels_;
  std::vector<float> raw_;        // [n][dim] keys in F32
  std::vector<float> xt_;         // [n_blocks][dim_a][kScoreRows] key operand
  std::vector<float> xrow_;       // [n][dim_a] the same, a key per row
  std::vector<float> zero_row_;   // [dim_a] zeros: padding of a last block
  std::vector<double> xnorm_;     // [n] |x|
  std::vector<double> ksq_;       // [n] |k|^2 (kL2 margin)
  std::vector<float> centroids_;  // [k][dim]
  std::vector<double> inv_norm_;  // [k] for ExactScore
  std::vector<float> panels_;     // packed centroid operand y
  double ymax_ = 0.0;             // max_c |y_c|
  double musq_max_ = 0.0;         // max_c |mu_c|^2
  std::vector<int32_t> assignment_, next_;
  // Pruning (kCosine, kInnerProduct): per key, bounds on the exact score of
  // its cluster (lower) and of every other (upper); lower = -inf: none.
  const bool prune_ = p_.metric != ClusterMetric::kL2;
  std::vector<double> lower_, upper_;
  std::vector<double> operand_, prev_operand_;  // [k][dim] y in double
  std::vector<int64_t> active_;                 // keys scored this iteration
  std::vector<float> active_xt_;                // their operand, blocks as xt_
  const float* score_xt_ = nullptr;             // xt_ or active_xt_
  int64_t score_blocks_ = 0;
};

// Sum of v[d]^2 in double over four interleaved partial sums (element d
// into d % 4): no chain of n dependent additions. These norms only scale
// the F32 operand and size the error bounds (whose slack is far above any
// double rounding), so their summation order is free; the assignments stay
// the reference's (header comment).
double SumOfSquares(const float* v, int n) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  int d = 0;
  for (; d + 4 <= n; d += 4) {
    for (int j = 0; j < 4; ++j) acc[j] += double{v[d + j]} * v[d + j];
  }
  for (; d < n; ++d) acc[d % 4] += double{v[d]} * v[d];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

void Solver::PrepareKeys() {
  const int dim = p_.dim;
  raw_.resize(p_.n * dim);
  xt_.assign(n_blocks_ * dim_a_ * kScoreRows, 0.0f);
  xrow_.resize(p_.n * dim_a_);
  zero_row_.assign(dim_a_, 0.0f);
  xnorm_.resize(p_.n);
  ksq_.resize(p_.n);
  const int64_t row_bytes = RowBytes(p_.dtype, p_.stride);
  for (int64_t i = 0; i < p_.n; ++i) {
    float* k = raw_.data() + i * dim;
    ks_.to_f32(p_.dtype, static_cast<const char*>(p_.keys) + i * row_bytes, dim,
               k);
    const double ss = SumOfSquares(k, dim);
    const double scale = p_.metric != ClusterMetric::kCosine ? 1.0
                         : ss > 0.0 ? 1.0 / std::sqrt(ss)
                                    : 0.0;
    float* xr = xrow_.data() + i * dim_a_;
    for (int d = 0; d < dim; ++d) xr[d] = static_cast<float>(k[d] * scale);
    // kL2: the constant 1 that picks up -|mu|^2/2.
    if (dim_a_ > dim) xr[dim] = 1.0f;
    float* x =
        xt_.data() + (i / kScoreRows) * dim_a_ * kScoreRows + i % kScoreRows;
    for (int d = 0; d < dim_a_; ++d) x[d * kScoreRows] = xr[d];
    xnorm_[i] = std::sqrt(SumOfSquares(xr, dim_a_));
    ksq_[i] = ss;
  }
}

void Solver::PackCentroids() {
  const int dim = p_.dim;
  panels_.assign(int64_t{n_panels_} * dim_a_ * width_, 0.0f);
  inv_norm_.resize(k_);
  if (prune_) operand_.resize(int64_t{k_} * dim);
  ymax_ = musq_max_ = 0.0;
  std::vector<float> y(dim_a_);
  for (int c = 0; c < k_; ++c) {
    const float* mu = centroids_.data() + int64_t{c} * dim;
    inv_norm_[c] = ref::contract::CentroidInvNorm(mu, dim);
    const double scale =
        p_.metric == ClusterMetric::kCosine ? inv_norm_[c] : 1.0;
    double musq = 0.0, ys = 0.0;
    for (int d = 0; d < dim; ++d) {
      musq += double{mu[d]} * mu[d];
      y[d] = static_cast<float>(mu[d] * scale);
      if (prune_) operand_[int64_t{c} * dim + d] = mu[d] * scale;
    }
    if (dim_a_ > dim) y[dim] = static_cast<float>(-0.5 * musq);
    for (int d = 0; d < dim_a_; ++d) ys += double{y[d]} * y[d];
    ymax_ = std::max(ymax_, std::sqrt(ys));
    musq_max_ = std::max(musq_max_, musq);
    float* panel = panels_.data() + int64_t{c / width_} * dim_a_ * width_;
    for (int d = 0; d < dim_a_; ++d) panel[d * width_ + c % width_] = y[d];
  }
}

// Twice a rigorous bound on |s_a - s_b - (t_a - t_b)| for key i, doubled
// again for safety: F32 dot rounding gamma_D <= 1.01 * D * u times
// |x| * |y|, plus the F32 rounding of the operands (<= 2u each relative, in
// the same units), plus the reference's own double rounding (kL2: relative
// to |k|^2 + |mu|^2; otherwise negligible against the F32 terms).
double Solver::Margin(int64_t i) const {
  double a = xnorm_[i] * ymax_;
  if (p_.metric == ClusterMetric::kL2) {
    a += (ksq_[i] + musq_max_) * 0x1p-28;
  }
  return 4.0 * (dim_a_ + 9) * kUnitRoundoff * a + 1e-30;
}

// The exact winner among clusters whose F32 score is >= threshold.
int32_t Solver::Settle(int64_t i, const float* s, double threshold) const {
  const float* key = raw_.data() + i * p_.dim;
  double best = -INFINITY;
  int32_t arg = -1;
  for (int c = 0; c < k_; ++c) {
    if (s[c] < threshold) continue;
    const double e = ref::contract::ExactScore(
        p_.metric, key, centroids_.data() + int64_t{c} * p_.dim, inv_norm_[c],
        p_.dim);
    if (arg < 0 || e > best) {  // strict: ties keep the lowest index
      best = e;
      arg = c;
    }
  }
  return std::max(arg, 0);
}

void Solver::ShiftBounds() {
  const int dim = p_.dim;
  std::vector<double> delta(k_);
  // The largest move, and the largest of the others (for the keys of the
  // cluster that moved most: their other clusters moved less).
  double max_delta = 0.0, second_delta = 0.0;
  int max_c = -1;
  for (int c = 0; c < k_; ++c) {
    double ss = 0.0;
    for (int d = 0; d < dim; ++d) {
      const double diff =
          operand_[int64_t{c} * dim + d] - prev_operand_[int64_t{c} * dim + d];
      ss += diff * diff;
    }
    // The slack covers the rounding of this sum (relative ~dim * 2^-53).
    delta[c] = std::sqrt(ss) * (1.0 + 1e-9) + 1e-12 * ymax_;
    if (delta[c] > max_delta) {
      second_delta = max_delta;
      max_delta = delta[c];
      max_c = c;
    } else {
      second_delta = std::max(second_delta, delta[c]);
    }
  }
  for (int64_t i = 0; i < p_.n; ++i) {
    if (lower_[i] == -INFINITY) continue;
    const double x = xnorm_[i] * (1.0 + 1e-6);  // |x| of the exact key
    const int32_t a = assignment_[i];
    lower_[i] -= x * delta[a];
    upper_[i] += x * (a == max_c ? second_delta : max_delta);
  }
}

void Solver::SelectActive() {
  active_.clear();
  for (int64_t i = 0; i < p_.n; ++i) {
    // Far above the double rounding of the reference's scores.
    const double slack = 1e-9 * (xnorm_[i] * ymax_ + 1e-30);
    if (prune_ && lower_[i] - upper_[i] > slack) {
      next_[i] = assignment_[i];
    } else {
      active_.push_back(i);
    }
  }
  const int64_t n_active = static_cast<int64_t>(active_.size());
  score_blocks_ = (n_active + kScoreRows - 1) / kScoreRows;
  if (n_active == p_.n) {  // every key, in place
    score_xt_ = xt_.data();
    return;
  }
  // A block of kScoreRows active keys at a time: each output row d is
  // written whole, from the keys' rows (no strided copy of each key); the
  // last block's missing keys read a row of zeros.
  active_xt_.resize(score_blocks_ * dim_a_ * kScoreRows);
  for (int64_t b = 0; b < score_blocks_; ++b) {
    const float* src[kScoreRows];
    for (int r = 0; r < kScoreRows; ++r) {
      const int64_t j = b * kScoreRows + r;
      src[r] =
          j < n_active ? xrow_.data() + active_[j] * dim_a_ : zero_row_.data();
    }
    float* dst = active_xt_.data() + b * dim_a_ * kScoreRows;
    for (int d = 0; d < dim_a_; ++d) {
      for (int r = 0; r < kScoreRows; ++r) dst[d * kScoreRows + r] = src[r][d];
    }
  }
  score_xt_ = active_xt_.data();
}

// Scores blocks [b0, b1) of score_xt_ (rows: active_ keys) and assigns them.
void Solver::AssignBlocks(int64_t b0, int64_t b1) {
  static thread_local std::vector<float> s;
  const int64_t lds = int64_t{n_panels_} * width_;
  const int64_t n_active = static_cast<int64_t>(active_.size());
  s.resize(kScoreRows * lds);
  for (int64_t b = b0; b < b1; ++b) {
    const float* xt = score_xt_ + b * dim_a_ * kScoreRows;
    if (width_ == kScoreColsNarrow) {
      ks_.score_block_narrow(xt, panels_.data(), dim_a_, s.data(), lds);
    } else {
      ks_.score_block(xt, panels_.data(), n_panels_, dim_a_, s.data(), lds);
    }
    for (int r = 0; r < kScoreRows; ++r) {
      const int64_t j = b * kScoreRows + r;
      if (j >= n_active) break;
      const int64_t i = active_[j];
      const float* row = s.data() + r * lds;
      float best, second;
      int idx;
      ks_.top2(row, k_, &best, &idx, &second);
      const double margin = Margin(i);
      if (double{best} - second > margin) {
        next_[i] = idx;
        if (prune_) {  // per-score error <= margin / 8: use margin / 4
          lower_[i] = double{best} - margin / 4;
          upper_[i] = double{second} + margin / 4;
        }
      } else {
        next_[i] = Settle(i, row, double{best} - margin);
        if (prune_) lower_[i] = -INFINITY;  // scored again next time
      }
    }
  }
}

void Solver::Run(ThreadPool* pool, KMeansResult* out) {
  *out = KMeansResult{};
  if (p_.n <= 0 || p_.dim <= 0) return;
  PrepareKeys();
  const int dim = p_.dim;
  centroids_.resize(int64_t{k_} * dim);
  const std::vector<int64_t> seeds = ref::contract::KMeansSeeds(p_.n, k_, p_.seed);
  for (int c = 0; c < k_; ++c) {
    std::copy_n(raw_.data() + seeds[c] * dim, dim,
                centroids_.data() + int64_t{c} * dim);
  }
  assignment_.assign(p_.n, -1);
  next_.resize(p_.n);
  if (prune_) {
    lower_.assign(p_.n, -INFINITY);
    upper_.assign(p_.n, INFINITY);
  }
  std::vector<int32_t> sizes(k_);
  for (int it = 1; it <= std::max(1, p_.max_iters); ++it) {
    PackCentroids();
    if (prune_ && it > 1) ShiftBounds();
    SelectActive();
    out->key_scorings += static_cast<int64_t>(active_.size());
    if (pool != nullptr && pool->size() > 1 && score_blocks_ > 1) {
      pool->ParallelFor(score_blocks_, 1, [this](int64_t b0, int64_t b1) {
        AssignBlocks(b0, b1);
      });
    } else {
      AssignBlocks(0, score_blocks_);
    }
    if (prune_) prev_operand_.swap(operand_);  // the bounds' centroids
    const bool changed = next_ != assignment_;
    assignment_.swap(next_);
    ref::contract::UpdateCentroids(raw_.data(), p_.n, dim, assignment_.data(), k_,
                              centroids_.data(), sizes.data());
    out->iterations = it;
    if (!changed) {
      out->converged = true;
      break;
    }
  }
  ref::contract::FinishKMeans(k_, dim, centroids_, sizes, assignment_, out);
}

double Cost(const KMeansProblem& p) {
  return static_cast<double>(p.n) * std::max(1, p.k) * std::max(1, p.dim);
}

}  // namespace

// Many problems (>= 2 per thread): one problem per thread at a time, pulled
// heaviest first. Few problems: one after another, each using every thread.
// Results do not depend on the number of threads.
void KMeansBatch(ThreadPool* pool, const KMeansProblem* problems, int count,
                 KMeansResult* results) {
  const KernelSet& ks = ActiveKernels();
  const int threads = pool != nullptr ? pool->size() : 1;
  if (threads <= 1 || count < 2 * threads) {
    for (int i = 0; i < count; ++i) {
      Solver(problems[i], ks).Run(pool, &results[i]);
    }
    return;
  }
  std::vector<int> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return Cost(problems[a]) > Cost(problems[b]);
  });
  std::atomic<int> next{0};
  pool->ParallelFor(threads, 1, [&](int64_t, int64_t) {
    for (int j; (j = next.fetch_add(1)) < count;) {
      Solver(problems[order[j]], ks).Run(nullptr, &results[order[j]]);
    }
  });
}

}  // namespace ckv::kernels::cpu
