// The backend seam: the one Transformer (model/transformer.h) drives a
// Backend op by op; a backend owns the activations, the compute resources
// (the CPU thread pool, a device and its streams) and the way attention
// reads the KV spans the caches return. Activations are opaque handles the
// Transformer never dereferences: on a device backend they name device
// memory. Weights and norm vectors are passed as the ModelWeights the
// backend was built for; their addresses are stable for the backend's life,
// so a device backend may key uploaded copies by address.
//
// A new backend goes into one folder, model/backend/NAME/, behind this
// interface, and is made by MakeBackend (backend.cc). See docs/design.md,
// "Backend seam".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/device/schedule.h"
#include "model/arch/arch.h"
#include "model/kv/store_env.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace ckv {

// Which backend runs the model. kAuto picks the best one this build and
// machine have: kCuda when the build has it and a CUDA device is usable,
// else kCpu. kFake is the device backend on the fake device
// (kernels/device/fake_runtime.h): a test instrument, never chosen by kAuto.
enum class BackendKind { kAuto, kCpu, kCuda, kFake };

// "auto", "cpu", "cuda", "fake".
const char* BackendKindName(BackendKind kind);
// Parses a name above (INVALID_ARGUMENT otherwise).
absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view name);
// The concrete kind kAuto stands for on this build and machine (probes
// the CUDA device once); other kinds unchanged.
BackendKind ResolveBackendKind(BackendKind kind);
// OK when this build can make `kind`; INVALID_ARGUMENT naming the backend
// this build does not have (cuda without nvcc) otherwise. Whether a device
// exists is MakeBackend's question (FAILED_PRECONDITION there).
absl::Status CheckBackendBuilt(BackendKind kind);
// ParseBackendKind, then CheckBackendBuilt: what a --backend flag accepts.
absl::StatusOr<BackendKind> ParseBackendFlag(absl::string_view name);

// Where a device backend keeps the K,V rows of closed segments (GPU.md,
// "kv.residency"): kOffload on the host only (pinned; sparse layers recall
// their selected rows per step, dense layers send whole segments), kDevice
// also on the device for the segment's life (device memory permitting),
// kAuto on the device while the resident-KV budget lasts, then offload.
// The CPU backend keeps everything on the host whatever the setting.
enum class KvResidency { kAuto, kDevice, kOffload };
// "auto", "device", "offload".
const char* KvResidencyName(KvResidency r);
// Parses a name above (INVALID_ARGUMENT otherwise).
absl::StatusOr<KvResidency> ParseKvResidency(absl::string_view name);

// The defaults of every backend's settings, in one place.
struct BackendOptions {
  int threads = 1;  // CPU worker threads (the CPU backend's pool)
  // kFake: the fake device's schedule, size and seed (phase thread orders
  // and the threaded schedule's delays; kernels/device/fake_runtime.h).
  kernels::device::Schedule fake_schedule = kernels::device::Schedule::kInline;
  int64_t fake_device_bytes = int64_t{1} << 30;
  uint64_t fake_seed = 1;
  int fake_max_delay_us = 50;  // kThreaded: random delay before each item
  // kFake: matrices of types other than F32/F16/BF16 uploaded dequantised
  // to BF16, as the CUDA backend does (the op suite's "bf16" case).
  bool fake_bf16_weights = false;
  // Device backends: cluster closed segments on the host (the CPU's
  // k-means bits, so that selections can be compared exactly with the CPU
  // backend's) instead of on the device.
  bool host_kmeans = false;
  // Device backends: segment K,V residency, and kAuto's budget (0: half
  // the device's memory).
  KvResidency kv_residency = KvResidency::kAuto;
  int64_t resident_kv_bytes = 0;
  // Device backends: replay the compute between attentions from graphs
  // captured per layer region (Backend::BeginRegion); off launches every
  // op (an operator's way out should a device's capture misbehave).
  bool device_graphs = true;
  // Device backends: an attention whose K/V rows to copy (not resident)
  // exceed this many bytes streams them in chunks of this size through two
  // landing buffers, overlapping each chunk's copy with the previous
  // chunk's attention (device memory: two chunks, not the whole context).
  int64_t kv_stream_chunk_bytes = int64_t{64} << 20;
};

// What GetServerInfo and the status page report.
struct BackendInfo {
  std::string name;                 // "cpu", "cuda", "fake"
  std::string device;               // e.g. the CPU model or GPU name
  int64_t device_memory_bytes = 0;  // device memory; 0 on the CPU backend
  // How --backend auto chose this backend (empty for a named one).
  std::string selection;
};

// Cumulative wall time of Forward calls, when TransformerOptions::profile is
// on: `attention` is the per-sequence part of the attention blocks (KV
// append, Select, attention over the selected rows), `select` the Select
// calls inside it; `total` covers whole forward steps (all layers, logits).
struct ForwardProfile {
  int64_t steps = 0;
  int64_t total_ns = 0;
  int64_t attention_ns = 0;
  int64_t select_ns = 0;
};

// An activation buffer of the backend: `width` floats per row of the
// current step. Only valid with the backend that made it.
struct Activation {
  int id = -1;
};

// Rotary embedding of one layer (model-layer types; the backend maps them
// to its kernels). freq_factors: null or [rot_dims / 2] host floats of the
// ModelWeights.
struct RopeSpec {
  RopeStyle style = RopeStyle::kNormal;
  int rot_dims = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float attn_factor = 1.0f;
  const float* freq_factors = nullptr;
};

// Attention of one layer: scores q.k * scale, softcap (> 0) and sliding
// window (> 0: keys p - window < k <= p) as in kernels/cpu/ops.h.
struct AttentionSpec {
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  float softcap = 0.0f;
  int64_t window = 0;
};

// The rows [row, row + n) of the step belong to one sequence whose KV lives
// in `cache`.
struct AttentionPart {
  KvCache* cache = nullptr;
  int64_t row = 0;
  int64_t n = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // What the backend is (its info_, plus how auto chose it).
  BackendInfo info() const {
    BackendInfo i = DoInfo();
    i.selection = selection_;
    return i;
  }
  // MakeBackend(kAuto) records its choice here.
  void set_selection(std::string s) { selection_ = std::move(s); }

  // The first error of the backend's device (ops return nothing): OK, or
  // the error after which every op is skipped and Logits writes NaN. A
  // device error is not recoverable: the KV caches of the step hold zero
  // rows where its K and V were lost. Transformer::Forward returns it.
  virtual absl::Status status() const { return absl::OkStatus(); }

  // Closed segments' K,V resident in device memory (kv residency; zeros on
  // the CPU). Thread-safe: another thread may ask while steps run.
  struct Residency {
    int64_t segment_bytes = 0;  // resident now
    int64_t evictions = 0;      // segment layers evicted for room, so far
    int64_t refusals = 0;       // segment layers kept on the host, so far
    // K,V bytes streamed through the landing buffers (attentions whose
    // rows to copy exceed kv_stream_chunk_bytes), so far.
    int64_t streamed_bytes = 0;
  };
  virtual Residency residency() const { return {}; }

  // What the clustered stores of the sequences this backend runs should be
  // made with (model/kv/store_env.h): on the CPU the heap and the stores'
  // own policies; on a device backend pinned segment rows (which its
  // attention copies straight from the segments) and a planner that
  // selects on the device. Stores made without it still work.
  virtual StoreEnv store_env() {
    StoreEnv env;
    env.arena = HeapArena();
    return env;
  }

  // A new activation of `width` floats per row. Call before the first step.
  virtual Activation NewActivation(int64_t width) = 0;

  // Starts a step whose rows are at these sequence positions; every
  // activation then holds positions.size() rows of undefined contents until
  // written. EndStep: the step's outputs have been read.
  virtual void BeginStep(absl::Span<const int64_t> positions) = 0;
  virtual void EndStep() = 0;

  // The ops between BeginRegion and EndRegion do the same work at the same
  // addresses every step of the same rows (the Transformer's blocks between
  // attentions): pure compute, no attention, no host reads, scalars fixed
  // per `region` (the same number every step). A device backend may
  // capture such a run as a graph once and replay it after.
  virtual void BeginRegion(int /*region*/) {}
  virtual void EndRegion() {}

  // out[r] = table[tokens[r]] * scale (dequantised), one row per token.
  virtual void Embed(const Matrix& table, absl::Span<const int32_t> tokens,
                     float scale, Activation out) = 0;
  // y[r] = W x[r]; x has w.cols floats per row, y w.rows.
  virtual void MatMul(const Matrix& w, Activation x, Activation y) = 0;
  // x[r] += bias (bias.size() == x's width).
  virtual void AddBias(Activation x, absl::Span<const float> bias) = 0;
  // Root-mean-square norm of every run of weight.size() floats (which divides
  // the width: per head for Q/K norms), times weight; out may be x.
  virtual void RmsNorm(Activation x, absl::Span<const float> weight, float eps,
                       Activation out) = 0;
  // Rotates n_heads heads of every row at the step's positions, in place.
  virtual void Rope(Activation x, int n_heads, const RopeSpec& rope) = 0;
  // out = act(gate) * up, elementwise (SwiGLU or GELU-tanh gate).
  virtual void Gate(FfnActivation act, Activation gate, Activation up,
                    Activation out) = 0;
  // x += y.
  virtual void Add(Activation x, Activation y) = 0;
  // For every part: appends its k, v rows to the part's cache for `layer`,
  // asks the cache what its queries attend (KvCache::Select) and writes the
  // attention of its q rows to `out`. profile: null, or accumulates the
  // attention and select times.
  virtual void Attention(int layer, const AttentionSpec& spec,
                         absl::Span<const AttentionPart> parts, Activation q,
                         Activation k, Activation v, Activation out,
                         ForwardProfile* profile) = 0;
  // After the step's last Attention, before its caches Commit: hands the
  // caches the host copies of rows the backend appended on its device
  // (KvCache::AppendOnDevice / FillAppended). No-op where K,V are host
  // memory.
  virtual void FinishAppends() {}
  // Copies the current step's rows of `a` (rows x width host floats) to
  // *out once every op that writes them has finished. Not on the forward
  // path: for the op suite (tests/ops) and diagnostics. After a device
  // error *out holds NaN.
  virtual void ReadRows(Activation a, std::vector<float>* out) = 0;
  // For the listed rows of x (ascending): RmsNorm(norm, eps), the output
  // matrix, then softcap (> 0); writes rows.size() x output.rows host floats
  // to *out.
  virtual void Logits(Activation x, absl::Span<const int64_t> rows,
                      absl::Span<const float> norm, float eps,
                      const Matrix& output, float softcap,
                      std::vector<float>* out) = 0;

 protected:
  virtual BackendInfo DoInfo() const = 0;

 private:
  std::string selection_;
};

// Makes a backend of `kind`. INVALID_ARGUMENT for a kind this build does
// not have; kCuda without a usable device: FAILED_PRECONDITION naming it;
// kAuto: kCuda when that works, else the CPU (info().selection says why);
// kFake owns a new fake device made from `options` (an error of the fake's
// set-up is returned).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    BackendKind kind, const BackendOptions& options);

}  // namespace ckv
