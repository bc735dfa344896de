// The argument blocks of the device backend's forward ops and the interface
// a real device implements them behind (issue 29). One block per op names
// device addresses (DevPtr) and sizes only, so that the op's host form (the
// fake device runs it, mapping each address through OpContext) and a device
// kernel consume exactly the same arguments. The device backend
// (model/backend/device/) builds the blocks; a runtime with launchers
// (Runtime::launchers(); CudaRuntime's are kernels/cuda/cuda_launchers.h)
// runs them on a native stream. Contracts are those of kernels/ref/ops.h.
//
// The attention op's spans are a table in device memory (AttnSpanDesc)
// rather than host pointers: the host writes it next to the staged rows,
// the kernel (or the fake's body) reads it.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device/cache_phases.h"
#include "kernels/device/op_tables.h"
#include "kernels/device/phases.h"
#include "kernels/device/runtime.h"
#include "kernels/device/selection_phases.h"
#include "kernels/dtype.h"

namespace ckv::kernels::device {

// out[r][0, cols) = dequantised table[tokens[r]] * scale, rows of `width`
// floats (width >= cols; the rest untouched). table: rows of
// RowBytes(type, cols).
struct EmbedArgs {
  DevPtr table, tokens, out;
  DType type = DType::kF32;
  int64_t vocab = 0, cols = 0, n = 0, width = 0;
  float scale = 1.0f;
};

// y[r] = W x[r] for r < n; W [n_out][n_in] of `type` rows, x, y F32.
struct MatMulArgs {
  DevPtr w, x, y;
  DType type = DType::kF32;
  int64_t n_in = 0, n_out = 0, n = 0;
};

// x[r][i] += bias[i], rows x n floats.
struct AddBiasArgs {
  DevPtr x, bias;
  int64_t rows = 0, n = 0;
};

// y = RmsNorm(x) * w over every run of n floats (rows runs); y may be x.
struct RmsNormArgs {
  DevPtr x, w, y;
  int64_t rows = 0, n = 0;
  float eps = 0.0f;
};

// In place on x [rows][n_heads][head_dim] at positions (int64 [rows]);
// factors: [rot_dims / 2] floats or null (DevPtr{}).
struct RopeArgs {
  DevPtr x, positions, factors;
  int64_t rows = 0;
  int n_heads = 0, head_dim = 0;
  bool neox = false;
  int rot_dims = 0;
  float freq_base = 10000.0f, freq_scale = 1.0f, attn_factor = 1.0f;
};

// out[i] = act(gate[i]) * up[i], i < n; out may be gate or up.
struct GateArgs {
  DevPtr gate, up, out;
  int64_t n = 0;
  bool gelu_tanh = false;  // false: SwiGLU (silu)
};

// x[i] += y[i], i < n.
struct AddArgs {
  DevPtr x, y;
  int64_t n = 0;
};

// Query head h of every query row attends spans (AttnSpanDesc) [heads[2h] ..
// heads[2h] + heads[2h + 1]) (int32 pairs); row_heads: each query row t
// has its own table, heads[2(t n_heads + h)] (several sequences' rows in
// one op: a batch of decode sessions). q, out [n_q][n_heads][head_dim],
// q_pos int64 [n_q]; a query at p sees keys at k <= p (and p - window < k
// when window > 0); scores q.k * scale, softcap > 0: cap * tanh(s / cap).
// splits > 1: a device may cut each head's rows into that many chunks
// attended in parallel and merged (workspace: AttentionWorkspaceBytes);
// the result is the same attention (summed in another order).
// state non-null: a chunk of streamed attention (ref::AttentionAccumulate):
// the spans' rows are folded into state ([n_q][n_heads][head_dim + 2]
// floats: max, weight sum, unnormalised accumulator; fresh: starts empty)
// and out is not written; AttentionFinishArgs then writes out.
struct AttentionArgs {
  DevPtr q, q_pos, out, spans, heads;
  int64_t n_spans = 0;
  int n_q = 0, n_heads = 0, head_dim = 0;
  float scale = 0.0f, softcap = 0.0f;
  int64_t window = 0;
  int splits = 1;
  DevPtr workspace;
  DevPtr state;
  bool fresh = false;
  bool row_heads = false;
  // Every span's dtype (kernels::DType) when they all share one, else -1
  // (a device may then attend a prefill on tensor cores).
  int32_t kv_dtype = -1;
};

// out = acc / l of each of n (query row, head) states (zeros where l == 0):
// ref::AttentionFinish.
struct AttentionFinishArgs {
  DevPtr state, out;
  int64_t n = 0;
  int head_dim = 0;
};

// The split count for n_q x n_heads query heads of at most max_rows rows
// each: enough blocks to fill a large GPU (~ 4 x 132), chunks of >= 256
// rows, at most 64 splits.
inline int AttentionSplits(int n_q, int n_heads, int64_t max_rows) {
  const int64_t blocks = int64_t{n_q} * n_heads;
  if (blocks <= 0 || max_rows < 512) return 1;
  int64_t splits = (528 + blocks - 1) / blocks;
  if (splits > max_rows / 256) splits = max_rows / 256;
  if (splits > 64) splits = 64;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

inline int64_t AttentionWorkspaceBytes(int n_q, int n_heads, int head_dim,
                                       int splits) {
  if (splits <= 1) return 0;
  return int64_t{splits} * n_q * n_heads * (head_dim + 2) * 4;
}

// For j < n: g[j] = RmsNorm(x[picked[j]]) * norm (width floats), then
// logits[j] = W g[j] (vocab floats; W [vocab][width] of `type`), then
// softcap > 0: cap * tanh(l / cap). picked: int64 [n]; x has x_rows rows.
struct LogitsArgs {
  DevPtr x, picked, norm, w, gathered, logits;
  DType type = DType::kF32;
  int64_t x_rows = 0, n = 0, width = 0, vocab = 0;
  float eps = 0.0f, softcap = 0.0f;
};

// For i < n: items[i] (ScatterItem) copies its bytes from src + from to its
// dst; src and items are device or mapped-pinned memory. src null: `from`
// is the source's own (device or mapped-pinned) address.
struct ScatterRowsArgs {
  DevPtr src, items;
  int64_t src_bytes = 0, n = 0;
};

// For i < n: items[i] (AppendItem) rounds row src_row of k and v (F32,
// rows of n_kv * head_dim) to `dtype` (F16 or BF16, the host's
// kernels::F32ToF16 / F32ToBF16 bits) and writes it to the item's device
// rows and its host copy. items may be mapped pinned memory.
struct AppendRowsArgs {
  DevPtr k, v, items;
  int64_t n = 0;
  int n_kv = 0, head_dim = 0;
  DType dtype = DType::kF16;
};

// One k-means job (model/kv/index_builder.h ClusterJob on the device):
// n keys of `dim` elements, rows `stride` elements apart, of `type`; k
// clusters from seeds (int32 [k]: ref::contract::KMeansSeeds); metric a
// kernels::ClusterMetric value. Writes the job result at `result`
// (KMeansResultLayout). scratch: KMeansScratchBytes(n, k, dim) bytes.
struct KMeansArgs {
  DevPtr keys, seeds, result, scratch;
  DType type = DType::kF16;
  int64_t stride = 0, n = 0, scratch_bytes = 0;
  int dim = 0, k = 1, max_iters = 20;
  int32_t metric = 0;
};

// F32, F16 or BF16: the weight types a GEMM library takes as stored (the
// CUDA launchers' TakesWeightType, and the fake's bf16 emulation).
inline bool IsFloatWeightType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// A device's kernels for the ops above, each enqueued on `stream` (the
// runtime's native stream handle). An error is the launch's (arguments out
// of the kernel's range: INVALID_ARGUMENT; the device's: INTERNAL).
class OpLaunchers {
 public:
  virtual ~OpLaunchers() = default;
  // Weight types MatMul, Embed and Logits take as stored; the backend
  // uploads a matrix of any other type dequantised to BF16.
  virtual bool TakesWeightType(DType type) const = 0;
  virtual absl::Status Embed(const EmbedArgs& a, void* stream) const = 0;
  virtual absl::Status MatMul(const MatMulArgs& a, void* stream) const = 0;
  virtual absl::Status AddBias(const AddBiasArgs& a, void* stream) const = 0;
  virtual absl::Status RmsNorm(const RmsNormArgs& a, void* stream) const = 0;
  virtual absl::Status Rope(const RopeArgs& a, void* stream) const = 0;
  virtual absl::Status Gate(const GateArgs& a, void* stream) const = 0;
  virtual absl::Status Add(const AddArgs& a, void* stream) const = 0;
  virtual absl::Status Attention(const AttentionArgs& a,
                                 void* stream) const = 0;
  virtual absl::Status AttentionFinish(const AttentionFinishArgs& a,
                                       void* stream) const = 0;
  virtual absl::Status Logits(const LogitsArgs& a, void* stream) const = 0;
  virtual absl::Status ScatterRows(const ScatterRowsArgs& a,
                                   void* stream) const = 0;
  virtual absl::Status AppendRows(const AppendRowsArgs& a,
                                  void* stream) const = 0;
  // The device planner's ops (kernels/device/phases.h ScoreClustersOp,
  // selection_phases.h SelectBlocksOp): the same per-thread bodies.
  virtual absl::Status ScoreClusters(const ScoreClustersArgs& a,
                                     void* stream) const = 0;
  virtual absl::Status SelectBlocks(const SelectArgs& a,
                                    void* stream) const = 0;
  // Their batches (ScoreClustersBatchOp, SelectBlocksBatchOp): every
  // planned query of a planner call in one launch set.
  virtual absl::Status ScoreClustersBatch(const ScoreBatchArgs& a,
                                          void* stream) const = 0;
  virtual absl::Status SelectBlocksBatch(const SelectBatchArgs& a,
                                         void* stream) const = 0;
  virtual absl::Status GatherQueries(const GatherQueriesArgs& a,
                                     void* stream) const = 0;
  // RowListsBatchOp's kernels.
  virtual absl::Status RowListsBatch(const RowListsBatchArgs& a,
                                     void* stream) const = 0;
  // CacheListsBatchOp's kernels.
  virtual absl::Status CacheListsBatch(const CacheListsArgs& a,
                                       void* stream) const = 0;
  // The index builder's k-means (deterministic for given arguments; need
  // not equal the CPU's bits), and the scratch it needs.
  virtual int64_t KMeansScratchBytes(int64_t n, int k, int dim) const = 0;
  virtual absl::Status KMeans(const KMeansArgs& a, void* stream) const = 0;
};

}  // namespace ckv::kernels::device
