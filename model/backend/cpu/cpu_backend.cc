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

void CpuBackend::Attention(int layer, const AttentionSpec& spec,
                           absl::Span<const AttentionPart> parts, Activation q,
                           Activation k, Activation v, Activation out,
                           ForwardProfile* profile) {
  const int64_t q_dim = Width(q);
  const int64_t kv_dim = Width(k);
  for (const AttentionPart& p : parts) {
    const Clock::time_point t0 = profile ? Clock::now() : Clock::time_point{};
    p.cache->Append(layer, p.n, Data(k) + p.row * kv_dim,
                    Data(v) + p.row * kv_dim);
    LayerQuery query{Data(q) + p.row * q_dim, &pos_[p.row],
                     static_cast<int>(p.n)};
    const Clock::time_point t1 = profile ? Clock::now() : Clock::time_point{};
    p.cache->Select(layer, query, &attend_);
    if (profile) profile->select_ns += NanosSince(t1);
    cpu::AttentionArgs args;
    args.q = query.q;
    args.q_pos = query.q_pos;
    args.n_q = query.n_q;
    args.n_heads = spec.n_heads;
    args.head_dim = spec.head_dim;
    args.scale = spec.scale;
    args.softcap = spec.softcap;
    args.window = spec.window;
    args.kv = attend_.per_head.data();
    args.out = Data(out) + p.row * q_dim;
    cpu::Attention(pool(), args);
    if (profile) profile->attention_ns += NanosSince(t0);
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
