#include "kernels/cuda/cuda_launchers.h"

#include <cuda_runtime.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_spans.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/forward_ops.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kmeans.h"
#include "kernels/cuda/norm_rope_swiglu.h"
#include "kernels/cuda/selection_ops.h"

namespace ckv::kernels::cuda {
namespace {

namespace dev = ::ckv::kernels::device;

template <typename T>
T* P(dev::DevPtr p) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(p.addr));
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

// A launcher's cudaError_t as a Status naming the op.
absl::Status Check(cudaError_t e, const char* op) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg =
      absl::StrCat("CUDA op '", op, "': ", cudaGetErrorName(e), " (",
                   cudaGetErrorString(e), ")");
  if (e == cudaErrorInvalidValue || e == cudaErrorNotSupported) {
    return absl::InvalidArgumentError(msg);
  }
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaLaunchers>> CudaLaunchers::Create() {
  GemmContext* gemm = nullptr;
  const cudaError_t e = CreateGemmContext(&gemm);
  if (e == cudaErrorSharedObjectInitFailed) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLAS: ", LastCublasLoadError()));
  }
  if (auto s = Check(e, "cublasCreate"); !s.ok()) return s;
  return std::unique_ptr<CudaLaunchers>(new CudaLaunchers(gemm));
}

CudaLaunchers::~CudaLaunchers() { DestroyGemmContext(gemm_); }

bool CudaLaunchers::TakesWeightType(DType type) const {
  return dev::IsFloatWeightType(type);
}

absl::Status CudaLaunchers::Embed(const dev::EmbedArgs& a, void* stream) const {
  return Check(EmbeddingGather(a.type, P<const void>(a.table), a.vocab, a.cols,
                               P<const int32_t>(a.tokens), a.n, a.scale,
                               a.width, P<float>(a.out), S(stream)),
               "embed");
}

absl::Status CudaLaunchers::MatMul(const dev::MatMulArgs& a,
                                   void* stream) const {
  return Check(cuda::MatMul(gemm_, a.type, P<const void>(a.w), a.n_in, a.n_out,
                            P<const float>(a.x), a.n, P<float>(a.y), S(stream)),
               "matmul");
}

absl::Status CudaLaunchers::AddBias(const dev::AddBiasArgs& a,
                                    void* stream) const {
  return Check(cuda::AddBias(P<float>(a.x), P<const float>(a.bias), a.rows, a.n,
                             S(stream)),
               "add_bias");
}

absl::Status CudaLaunchers::RmsNorm(const dev::RmsNormArgs& a,
                                    void* stream) const {
  return Check(cuda::RmsNorm(P<const float>(a.x), P<const float>(a.w), a.rows,
                             a.n, a.eps, P<float>(a.y), S(stream)),
               "rms_norm");
}

absl::Status CudaLaunchers::Rope(const dev::RopeArgs& a, void* stream) const {
  RopeConfig c;
  c.neox = a.neox;
  c.rot_dims = a.rot_dims;
  c.freq_base = a.freq_base;
  c.freq_scale = a.freq_scale;
  c.attn_factor = a.attn_factor;
  c.freq_factors = a.factors.addr != 0 ? P<const float>(a.factors) : nullptr;
  return Check(cuda::Rope(P<float>(a.x), a.rows, a.n_heads, a.head_dim,
                          P<const int64_t>(a.positions), c, S(stream)),
               "rope");
}

absl::Status CudaLaunchers::Gate(const dev::GateArgs& a, void* stream) const {
  const float* g = P<const float>(a.gate);
  const float* u = P<const float>(a.up);
  if (a.gelu_tanh) {
    return Check(GeluTanhGate(g, u, a.n, P<float>(a.out), S(stream)), "gate");
  }
  return Check(SwiGlu(g, u, a.n, P<float>(a.out), S(stream)), "gate");
}

absl::Status CudaLaunchers::Add(const dev::AddArgs& a, void* stream) const {
  return Check(cuda::Add(P<float>(a.x), P<const float>(a.y), a.n, S(stream)),
               "add");
}

absl::Status CudaLaunchers::Attention(const dev::AttentionArgs& a,
                                      void* stream) const {
  SpanAttentionParams p;
  p.q = P<const float>(a.q);
  p.q_pos = P<const int64_t>(a.q_pos);
  p.spans = P<const dev::AttnSpanDesc>(a.spans);
  p.heads = P<const int32_t>(a.heads);
  p.row_heads = a.row_heads;
  p.out = P<float>(a.out);
  p.n_q = a.n_q;
  p.n_heads = a.n_heads;
  p.head_dim = a.head_dim;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.window = a.window;
  p.splits = a.splits;
  p.workspace = a.splits > 1 ? P<float>(a.workspace) : nullptr;
  p.state = a.state.null() ? nullptr : P<float>(a.state);
  p.fresh = a.fresh;
  p.kv_dtype = a.kv_dtype;
  return Check(SpanAttention(p, S(stream)), "attention");
}

absl::Status CudaLaunchers::AttentionFinish(const dev::AttentionFinishArgs& a,
                                            void* stream) const {
  return Check(SpanAttentionFinish(P<const float>(a.state), a.n, a.head_dim,
                                   P<float>(a.out), S(stream)),
               "attention_finish");
}

absl::Status CudaLaunchers::Logits(const dev::LogitsArgs& a,
                                   void* stream) const {
  if (auto s =
          Check(RmsNormPicked(P<const float>(a.x), P<const int64_t>(a.picked),
                              P<const float>(a.norm), a.n, a.width, a.eps,
                              P<float>(a.gathered), S(stream)),
                "logits (norm)");
      !s.ok()) {
    return s;
  }
  if (auto s = Check(cuda::MatMul(gemm_, a.type, P<const void>(a.w), a.width,
                                  a.vocab, P<const float>(a.gathered), a.n,
                                  P<float>(a.logits), S(stream)),
                     "logits (matmul)");
      !s.ok()) {
    return s;
  }
  if (a.softcap <= 0.0f) return absl::OkStatus();
  return Check(SoftCap(P<float>(a.logits), a.n * a.vocab, a.softcap, S(stream)),
               "logits (softcap)");
}

absl::Status CudaLaunchers::ScatterRows(const dev::ScatterRowsArgs& a,
                                        void* stream) const {
  return Check(ScatterItems(P<const char>(a.src),
                            P<const dev::ScatterItem>(a.items), a.n, S(stream)),
               "scatter_rows");
}

absl::Status CudaLaunchers::AppendRows(const dev::AppendRowsArgs& a,
                                       void* stream) const {
  if (a.dtype != DType::kF16 && a.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        "append_rows: K/V rows must be F16 or BF16");
  }
  return Check(cuda::AppendRows(P<const float>(a.k), P<const float>(a.v),
                                P<const dev::AppendItem>(a.items), a.n, a.n_kv,
                                a.head_dim, a.dtype == DType::kBF16, S(stream)),
               "append_rows");
}

absl::Status CudaLaunchers::ScoreClusters(const dev::ScoreClustersArgs& a,
                                          void* stream) const {
  return Check(cuda::ScoreClusters(P<const float>(a.q), a.n_q,
                                   P<const uint16_t>(a.panels), a.n, a.dim,
                                   P<float>(a.scores), a.ld, S(stream)),
               "score_clusters");
}

absl::Status CudaLaunchers::SelectBlocks(const dev::SelectArgs& a,
                                         void* stream) const {
  const dev::threads::SelectView v = dev::SelectViewOf(
      a, [](dev::DevPtr p, int64_t, bool) { return P<void>(p); });
  return Check(cuda::SelectBlocks(v, S(stream)), "select_blocks");
}

absl::Status CudaLaunchers::ScoreClustersBatch(const dev::ScoreBatchArgs& a,
                                               void* stream) const {
  cuda::ScoreBatch b;
  b.items = P<const dev::ScoreItem>(a.items);
  b.thread_base = P<const int64_t>(a.thread_base);
  b.n_items = a.n_items;
  b.dim = a.dim;
  b.q_pool = P<const float>(a.q_pool);
  b.q_elems = a.q_elems;
  b.panel_pool = P<const uint16_t>(a.panel_pool);
  b.panel_elems = a.panel_elems;
  b.score_pool = P<float>(a.score_pool);
  b.score_elems = a.score_elems;
  b.total_threads = a.total_threads;
  return Check(cuda::ScoreClustersBatch(b, S(stream)), "score_clusters_batch");
}

absl::Status CudaLaunchers::GatherQueries(const dev::GatherQueriesArgs& a,
                                          void* stream) const {
  return Check(cuda::GatherQueries(P<const dev::QueryItem>(a.items), a.n_items,
                                   P<float>(a.pool), a.pool_elems, S(stream)),
               "gather_queries");
}

absl::Status CudaLaunchers::RowListsBatch(const dev::RowListsBatchArgs& a,
                                          void* stream) const {
  return Check(cuda::RowListsBatch(P<const dev::threads::RowListItem>(a.items),
                                   a.n_items, a.max_slots, S(stream)),
               "row_lists_batch");
}

absl::Status CudaLaunchers::CacheListsBatch(const dev::CacheListsArgs& a,
                                            void* stream) const {
  return Check(
      cuda::CacheListsBatch(P<const dev::CacheItem>(a.items), a.n_items,
                            a.max_requests, a.max_slots, S(stream)),
      "cache_lists_batch");
}

absl::Status CudaLaunchers::SelectBlocksBatch(const dev::SelectBatchArgs& a,
                                              void* stream) const {
  return Check(
      cuda::SelectBlocksBatch(P<const dev::threads::SelectItem>(a.items),
                              a.n_items, a.max_n, S(stream)),
      "select_blocks_batch");
}

namespace {

// The raw KMeansRun arrays and its workspace, carved from the op's scratch.
struct KMeansScratch {
  int64_t centroids = 0, assignment = 0, sizes = 0, remap = 0, iters = 0,
          workspace = 0, bytes = 0;
};

KMeansScratch CarveKMeans(int64_t n, int k, int dim) {
  auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
  KMeansBatch probe;
  probe.n_problems = 1;
  probe.n = n;
  probe.k = k;
  probe.dim = dim;
  KMeansScratch s;
  s.assignment = up(int64_t{k} * dim * 4);
  s.sizes = s.assignment + up(n * 4);
  s.remap = s.sizes + up(int64_t{k} * 4);
  s.iters = s.remap + up(int64_t{k} * 4);
  s.workspace = s.iters + 256;
  s.bytes = s.workspace + up(static_cast<int64_t>(KMeansWorkspaceBytes(probe)));
  return s;
}

}  // namespace

int64_t CudaLaunchers::KMeansScratchBytes(int64_t n, int k, int dim) const {
  return CarveKMeans(n, k, dim).bytes;
}

absl::Status CudaLaunchers::KMeans(const dev::KMeansArgs& a,
                                   void* stream) const {
  const KMeansScratch s = CarveKMeans(a.n, a.k, a.dim);
  if (a.scratch_bytes < s.bytes) {
    return absl::InvalidArgumentError("CUDA op 'kmeans': scratch too small");
  }
  char* base = P<char>(a.scratch);
  KMeansBatch b;
  b.keys = P<const void>(a.keys);
  b.dtype = a.type;
  b.head_stride = 0;
  b.row_stride = a.stride;
  b.n_problems = 1;
  b.n = a.n;
  b.dim = a.dim;
  b.k = a.k;
  b.metric = static_cast<KMeansMetric>(a.metric);
  b.centroids = reinterpret_cast<float*>(base);
  b.assignment = reinterpret_cast<int32_t*>(base + s.assignment);
  b.sizes = reinterpret_cast<int32_t*>(base + s.sizes);
  auto* iters = reinterpret_cast<int32_t*>(base + s.iters);
  if (auto st = Check(KMeansRun(b, P<const int32_t>(a.seeds), a.max_iters,
                                base + s.workspace,
                                static_cast<size_t>(s.bytes - s.workspace),
                                iters, nullptr, S(stream)),
                      "kmeans");
      !st.ok()) {
    return st;
  }
  return Check(
      KMeansCompact(b, iters, reinterpret_cast<int32_t*>(base + s.remap),
                    P<void>(a.result), S(stream)),
      "kmeans (compact)");
}

}  // namespace ckv::kernels::cuda
