#include "model/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/cpu/ops.h"
#include "model/backend/kernel_args.h"

namespace ckv {

namespace cpu = kernels::cpu;

namespace {

using Clock = std::chrono::steady_clock;

// The "model name" line of /proc/cpuinfo, or "host CPU" where there is none.
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return "host CPU";
}

// Whether no two parts share a cache (one session per part, as the engine
// batches them): only then may their selections run concurrently.
bool DistinctCaches(absl::Span<const AttentionPart> parts) {
  for (size_t i = 1; i < parts.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (parts[i].cache == parts[j].cache) return false;
    }
  }
  return true;
}

}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options)
    : pool_(std::make_unique<cpu::ThreadPool>(std::max(1, options.threads))) {
  info_.name = "cpu";
  info_.device = absl::StrCat(CpuModelName(), " (", pool_->size(), " threads)");
  info_.device_memory_bytes = 0;  // no device memory: all in host RAM
}

CpuBackend::~CpuBackend() = default;

Activation CpuBackend::NewActivation(int64_t width) {
  buffers_.push_back(Buffer{width, {}});
  return Activation{static_cast<int>(buffers_.size()) - 1};
}

void CpuBackend::BeginStep(absl::Span<const int64_t> positions) {
  rows_ = static_cast<int64_t>(positions.size());
  for (Buffer& b : buffers_) b.data.resize(rows_ * b.width);
  pos_.assign(positions.begin(), positions.end());
}

void CpuBackend::Embed(const Matrix& table, absl::Span<const int32_t> tokens,
                       float scale, Activation out) {
  EmbedRows(static_cast<const uint8_t*>(table.data), table.type, table.cols,
            tokens.data(), static_cast<int64_t>(tokens.size()), scale,
            Width(out), Data(out));
}

void CpuBackend::MatMul(const Matrix& w, Activation x, Activation y) {
  cpu::MatMul(pool(), w.type, w.data, w.cols, w.rows, Data(x), rows_, Data(y));
}

void CpuBackend::AddBias(Activation x, absl::Span<const float> bias) {
  cpu::AddBias(Data(x), bias.data(), rows_, Width(x));
}

void CpuBackend::RmsNorm(Activation x, absl::Span<const float> weight,
                         float eps, Activation out) {
  const int64_t n = static_cast<int64_t>(weight.size());
  cpu::RmsNorm(pool(), Data(x), weight.data(), rows_ * Width(x) / n, n, eps,
               Data(out));
}

void CpuBackend::Rope(Activation x, int n_heads, const RopeSpec& rope) {
  cpu::Rope(pool(), Data(x), rows_, n_heads,
            static_cast<int>(Width(x) / n_heads), pos_.data(),
            CpuRopeParams(rope));
}

void CpuBackend::Gate(FfnActivation act, Activation gate, Activation up,
                      Activation out) {
  const int64_t n = rows_ * Width(gate);
  if (act == FfnActivation::kGeluTanhGate) {
    cpu::GeluTanhGate(pool(), Data(gate), Data(up), n, Data(out));
  } else {
    cpu::SwiGlu(pool(), Data(gate), Data(up), n, Data(out));
  }
}

void CpuBackend::Add(Activation x, Activation y) {
  cpu::Add(Data(x), Data(y), rows_ * Width(x));
}

// With several parts on distinct caches (one session each, as the engine
// batches them), every part's new rows are appended, then their rows are
// selected in parallel over the parts (their stores are independent
// objects, and a store's k-means runs on its ClusterWorker, not on this
// pool), then each part attends on the pool. Selection is single-threaded
// per store, so with 16 decoding sessions it took 8 % of a step on one
// thread while the other waited. Otherwise each part appends, selects and
// attends before the next appends (a later part of the same cache may
// move the rows an earlier part's spans point to).
void CpuBackend::Attention(int layer, const AttentionSpec& spec,
                           absl::Span<const AttentionPart> parts, Activation q,
                           Activation k, Activation v, Activation out,
                           ForwardProfile* profile) {
  const int64_t q_dim = Width(q);
  const int64_t kv_dim = Width(k);
  const int64_t n = static_cast<int64_t>(parts.size());
  if (attend_.size() < parts.size()) attend_.resize(parts.size());
  auto append = [&](int64_t i) {
    const AttentionPart& p = parts[i];
    p.cache->Append(layer, p.n, Data(k) + p.row * kv_dim,
                    Data(v) + p.row * kv_dim);
  };
  auto select = [&](int64_t begin, int64_t end) {
    const Clock::time_point t = profile ? Clock::now() : Clock::time_point{};
    for (int64_t i = begin; i < end; ++i) {
      const AttentionPart& p = parts[i];
      p.cache->Select(
          layer, {Data(q) + p.row * q_dim, &pos_[p.row], static_cast<int>(p.n)},
          &attend_[i]);
    }
    return profile ? NanosSince(t) : 0;
  };
  auto attend = [&](int64_t i) {
    const AttentionPart& p = parts[i];
    cpu::AttentionArgs args;
    args.q = Data(q) + p.row * q_dim;
    args.q_pos = &pos_[p.row];
    args.n_q = static_cast<int>(p.n);
    args.n_heads = spec.n_heads;
    args.head_dim = spec.head_dim;
    args.scale = spec.scale;
    args.softcap = spec.softcap;
    args.window = spec.window;
    args.kv = attend_[i].per_head.data();
    args.out = Data(out) + p.row * q_dim;
    cpu::Attention(pool(), args);
  };
  const Clock::time_point t0 = profile ? Clock::now() : Clock::time_point{};
  int64_t select_ns = 0;
  if (n > 1 && pool()->size() > 1 && DistinctCaches(parts)) {
    for (int64_t i = 0; i < n; ++i) append(i);
    const Clock::time_point t1 = profile ? Clock::now() : Clock::time_point{};
    pool()->ParallelFor(n, 1, [&](int64_t b, int64_t e) { select(b, e); });
    if (profile) select_ns = NanosSince(t1);  // the wall time
    for (int64_t i = 0; i < n; ++i) attend(i);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      append(i);
      select_ns += select(i, i + 1);
      attend(i);
    }
  }
  if (profile) {
    profile->select_ns += select_ns;
    profile->attention_ns += NanosSince(t0);
  }
}

void CpuBackend::ReadRows(Activation a, std::vector<float>* out) {
  const std::vector<float>& d = buffers_[a.id].data;
  out->assign(d.begin(), d.end());
}

void CpuBackend::Logits(Activation x, absl::Span<const int64_t> rows,
                        absl::Span<const float> norm, float eps,
                        const Matrix& output, float softcap,
                        std::vector<float>* out) {
  const int64_t width = Width(x);
  const int64_t n = static_cast<int64_t>(rows.size());
  gathered_.resize(n * width);
  for (int64_t j = 0; j < n; ++j) {
    cpu::RmsNorm(nullptr, Data(x) + rows[j] * width, norm.data(), 1, width, eps,
                 &gathered_[j * width]);
  }
  out->resize(n * output.rows);
  cpu::MatMul(pool(), output.type, output.data, output.cols, output.rows,
              gathered_.data(), n, out->data());
  if (softcap > 0.0f)
    cpu::SoftCap(pool(), out->data(), n * output.rows, softcap);
}

}  // namespace ckv
