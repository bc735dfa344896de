// Synthetic attention inputs with the structure of real LLM keys, for the
// `keys` workload of cluster_bench.
//
// Keys, per KV head, before RoPE: a mixture of `directions` unit vectors
// with Zipf weights; consecutive tokens keep their component with
// probability `stay` (topics come in runs); each key is
// scale * r * (u + noise * g / sqrt(d)), r log-normal (magnitudes vary),
// plus `outlier_channels` channels of large, fixed-sign magnitude placed in
// the lowest-frequency RoPE pairs (where real outlier channels sit). RoPE
// (normal mode, `rope_base`) is then applied at each position. Values are
// standard normal.
//
// Queries, per query head: the normalised sum of the post-RoPE keys of
// `query_regions` random earlier regions of `region_tokens` tokens (outlier
// pairs removed), plus relative noise, scaled so that q.k / sqrt(d) has
// standard deviation `logit_std` over the context: a head that attends
// sharply to a few regions. Every query head chooses its own regions.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "bench/cluster_options.h"

namespace ckv::kernels::cpu {
class ThreadPool;
}

namespace ckv::bench {

struct KeyData {
  int64_t n = 0;
  int n_kv = 0, head_dim = 0;
  std::vector<float> k, v;  // [n][n_kv][head_dim], post-RoPE keys

  const float* key(int64_t pos, int kv_head) const {
    return &k[(static_cast<size_t>(pos) * n_kv + kv_head) * head_dim];
  }
  int64_t row_elems() const { return int64_t{n_kv} * head_dim; }
};

// n positions of keys and values (deterministic for a given seed).
KeyData GenerateKeys(const KeyGenSpec& spec, int n_kv, int head_dim, int64_t n,
                     uint64_t seed, kernels::cpu::ThreadPool* pool);

// One decode query, [n_heads][head_dim], attending regions inside
// [first, end) of the keys.
std::vector<float> MakeQuery(const KeyGenSpec& spec, const KeyData& keys,
                             int n_heads, int64_t first, int64_t end,
                             std::mt19937_64& rng);

// base plus relative Gaussian noise (per head), same norm per head: the
// drift of a query between consecutive decode steps.
std::vector<float> PerturbQuery(const std::vector<float>& base, int head_dim,
                                double noise, std::mt19937_64& rng);

}  // namespace ckv::bench
