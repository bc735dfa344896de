// DeviceBackend's forward ops other than attention: each builds the op's
// argument block (kernels/device/op_launchers.h) once; the op's host form
// (what the fake runs) reads its ranges through that block, and a runtime
// with launchers runs the same block on its device.
#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"
#include "model/backend/device/device_backend.h"
#include "model/backend/kernel_args.h"

namespace ckv {

namespace cpu = kernels::cpu;
namespace dev = kernels::device;

namespace {

int64_t FloatBytes(int64_t n) {
  return n * static_cast<int64_t>(sizeof(float));
}

constexpr int64_t kConvertChunk = int64_t{4} << 20;  // BF16 bytes per upload

}  // namespace

bool DeviceBackend::TakesWeightType(kernels::DType t) const {
  if (launchers_ != nullptr) return launchers_->TakesWeightType(t);
  return !debug_.bf16_weights || dev::IsFloatWeightType(t);
}

DeviceBackend::DevMatrix DeviceBackend::ResidentMatrix(const Matrix& m) {
  const int64_t stored = m.rows * kernels::RowBytes(m.type, m.cols);
  if (TakesWeightType(m.type)) {
    return DevMatrix{Resident(m.data, stored), m.type, stored};
  }
  const int64_t bytes = m.rows * m.cols * 2;
  DevMatrix out{DevPtr{}, kernels::DType::kBF16, bytes};
  if (!ok() || m.data == nullptr || m.rows <= 0) return out;
  const auto key = std::make_pair(static_cast<const void*>(m.data), stored);
  if (auto it = resident_.find(key); it != resident_.end()) {
    out.ptr = it->second;
    return out;
  }
  FlushDeferred();
  auto d = rt_->Malloc(bytes);
  if (!Ok(d.status())) return out;
  resident_[key] = *d;
  resident_bytes_ += bytes;
  // The CPU's verified dequantiser, rounded to BF16, uploaded in chunks of
  // whole rows.
  const int64_t row_bytes = kernels::RowBytes(m.type, m.cols);
  const int64_t chunk_rows = std::max<int64_t>(1, kConvertChunk / (2 * m.cols));
  std::vector<float> row(static_cast<size_t>(m.cols));
  std::vector<uint16_t> bf16;
  const auto* src = static_cast<const uint8_t*>(m.data);
  for (int64_t r0 = 0; r0 < m.rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, m.rows - r0);
    bf16.resize(static_cast<size_t>(n * m.cols));
    for (int64_t r = 0; r < n; ++r) {
      cpu::DequantizeRow(m.type, src + (r0 + r) * row_bytes, m.cols,
                         row.data());
      for (int64_t j = 0; j < m.cols; ++j) {
        bf16[static_cast<size_t>(r * m.cols + j)] =
            kernels::F32ToBF16(row[static_cast<size_t>(j)]);
      }
    }
    if (!Upload(*d + r0 * m.cols * 2, bf16.data(), n * m.cols * 2,
                upload_stage_)) {
      return out;
    }
  }
  out.ptr = *d;
  return out;
}

void DeviceBackend::Embed(const Matrix& table, absl::Span<const int32_t> tokens,
                          float scale, Activation out) {
  const DevMatrix t = ResidentMatrix(table);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t tok_bytes = n * static_cast<int64_t>(sizeof(int32_t));
  if (!GrowDevice(tok_dev_, tok_bytes) ||
      !StepUpload(tok_dev_.ptr, tokens.data(), tok_bytes)) {
    return;
  }
  dev::EmbedArgs a;
  a.table = t.ptr;
  a.tokens = tok_dev_.ptr;
  a.out = Ptr(out);
  a.type = t.type;
  a.vocab = table.rows;
  a.cols = table.cols;
  a.n = n;
  a.width = Width(out);
  a.scale = scale;
  Run(
      "embed", {{a.table, t.bytes}, {a.tokens, tok_bytes}}, {Rows(out)},
      [a, tb = t.bytes](dev::OpContext& c) {
        EmbedRows(c.In<uint8_t>(a.table, tb), a.type, a.cols,
                  c.In<int32_t>(a.tokens, a.n), a.n, a.scale, a.width,
                  c.Out<float>(a.out, a.n * a.width));
      },
      Kernel(&dev::OpLaunchers::Embed, a));
}

void DeviceBackend::MatMul(const Matrix& w, Activation x, Activation y) {
  const DevMatrix wm = ResidentMatrix(w);
  dev::MatMulArgs a;
  a.w = wm.ptr;
  a.x = Ptr(x);
  a.y = Ptr(y);
  a.type = wm.type;
  a.n_in = w.cols;
  a.n_out = w.rows;
  a.n = rows_;
  Run(
      "matmul", {{a.w, wm.bytes}, Rows(x)}, {Rows(y)},
      [a, wb = wm.bytes](dev::OpContext& c) {
        cpu::MatMul(nullptr, a.type, c.In<uint8_t>(a.w, wb), a.n_in, a.n_out,
                    c.In<float>(a.x, a.n * a.n_in), a.n,
                    c.Out<float>(a.y, a.n * a.n_out));
      },
      Kernel(&dev::OpLaunchers::MatMul, a));
}

void DeviceBackend::AddBias(Activation x, absl::Span<const float> bias) {
  dev::AddBiasArgs a;
  a.n = static_cast<int64_t>(bias.size());
  a.bias = Resident(bias.data(), FloatBytes(a.n));
  a.x = Ptr(x);
  a.rows = rows_;
  Run(
      "add_bias", {{a.bias, FloatBytes(a.n)}}, {Rows(x)},
      [a](dev::OpContext& c) {
        cpu::AddBias(c.Out<float>(a.x, a.rows * a.n), c.In<float>(a.bias, a.n),
                     a.rows, a.n);
      },
      Kernel(&dev::OpLaunchers::AddBias, a));
}

void DeviceBackend::RmsNorm(Activation x, absl::Span<const float> weight,
                            float eps, Activation out) {
  dev::RmsNormArgs a;
  a.n = static_cast<int64_t>(weight.size());
  a.w = Resident(weight.data(), FloatBytes(a.n));
  a.x = Ptr(x);
  a.y = Ptr(out);
  a.rows = rows_ * Width(x) / a.n;
  a.eps = eps;
  const bool in_place = x.id == out.id;
  std::vector<Range> reads = {{a.w, FloatBytes(a.n)}};
  if (!in_place) reads.push_back(Rows(x));
  Run(
      "rms_norm", std::move(reads), {Rows(out)},
      [a, in_place](dev::OpContext& c) {
        const int64_t total = a.rows * a.n;
        float* y = c.Out<float>(a.y, total);
        const float* in = in_place ? y : c.In<float>(a.x, total);
        cpu::RmsNorm(nullptr, in, c.In<float>(a.w, a.n), a.rows, a.n, a.eps, y);
      },
      Kernel(&dev::OpLaunchers::RmsNorm, a));
}

void DeviceBackend::Rope(Activation x, int n_heads, const RopeSpec& rope) {
  const int64_t n_factors = rope.freq_factors ? rope.rot_dims / 2 : 0;
  dev::RopeArgs a;
  a.factors = Resident(rope.freq_factors, FloatBytes(n_factors));
  a.x = Ptr(x);
  a.positions = pos_dev_.ptr;
  a.rows = rows_;
  a.n_heads = n_heads;
  a.head_dim = static_cast<int>(Width(x) / n_heads);
  a.neox = rope.style == RopeStyle::kNeox;
  a.rot_dims = rope.rot_dims;
  a.freq_base = rope.freq_base;
  a.freq_scale = rope.freq_scale;
  a.attn_factor = rope.attn_factor;
  const int64_t pos_bytes = a.rows * static_cast<int64_t>(sizeof(int64_t));
  std::vector<Range> reads = {{a.positions, pos_bytes}};
  if (n_factors > 0) reads.push_back({a.factors, FloatBytes(n_factors)});
  Run(
      "rope", std::move(reads), {Rows(x)},
      [a, n_factors, p = CpuRopeParams(rope)](dev::OpContext& c) mutable {
        p.freq_factors =
            n_factors > 0 ? c.In<float>(a.factors, n_factors) : nullptr;
        cpu::Rope(nullptr,
                  c.Out<float>(a.x, a.rows * a.n_heads * int64_t{a.head_dim}),
                  a.rows, a.n_heads, a.head_dim,
                  c.In<int64_t>(a.positions, a.rows), p);
      },
      Kernel(&dev::OpLaunchers::Rope, a));
}

void DeviceBackend::Gate(FfnActivation act, Activation gate, Activation up,
                         Activation out) {
  dev::GateArgs a;
  a.n = rows_ * Width(gate);
  a.gate = Ptr(gate);
  a.up = Ptr(up);
  a.out = Ptr(out);
  a.gelu_tanh = act == FfnActivation::kGeluTanhGate;
  const bool gate_is_out = gate.id == out.id, up_is_out = up.id == out.id;
  std::vector<Range> reads;
  if (!gate_is_out) reads.push_back(Rows(gate));
  if (!up_is_out) reads.push_back(Rows(up));
  Run(
      "gate", std::move(reads), {Rows(out)},
      [a, gate_is_out, up_is_out](dev::OpContext& c) {
        float* o = c.Out<float>(a.out, a.n);
        const float* g = gate_is_out ? o : c.In<float>(a.gate, a.n);
        const float* u = up_is_out ? o : c.In<float>(a.up, a.n);
        if (a.gelu_tanh) {
          cpu::GeluTanhGate(nullptr, g, u, a.n, o);
        } else {
          cpu::SwiGlu(nullptr, g, u, a.n, o);
        }
      },
      Kernel(&dev::OpLaunchers::Gate, a));
}

void DeviceBackend::Add(Activation x, Activation y) {
  dev::AddArgs a;
  a.n = rows_ * Width(x);
  a.x = Ptr(x);
  a.y = Ptr(y);
  Run(
      "add", {Rows(y)}, {Rows(x)},
      [a](dev::OpContext& c) {
        cpu::Add(c.Out<float>(a.x, a.n), c.In<float>(a.y, a.n), a.n);
      },
      Kernel(&dev::OpLaunchers::Add, a));
}

// ---- Logits -----------------------------------------------------------------

void DeviceBackend::Logits(Activation x, absl::Span<const int64_t> rows,
                           absl::Span<const float> norm, float eps,
                           const Matrix& output, float softcap,
                           std::vector<float>* out) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t width = Width(x), vocab = output.rows;
  out->assign(static_cast<size_t>(n * vocab),
              std::numeric_limits<float>::quiet_NaN());
  const DevPtr nd = Resident(norm.data(), FloatBytes(width));
  const DevMatrix wm = ResidentMatrix(output);
  const int64_t picked_bytes = n * static_cast<int64_t>(sizeof(int64_t));
  if (!GrowDevice(gathered_dev_, FloatBytes(n * width)) ||
      !GrowDevice(logits_dev_, FloatBytes(n * vocab)) ||
      !GrowDevice(picked_dev_, picked_bytes) ||
      !StepUpload(picked_dev_.ptr, rows.data(), picked_bytes)) {
    return;
  }
  dev::LogitsArgs a;
  a.x = Ptr(x);
  a.picked = picked_dev_.ptr;
  a.norm = nd;
  a.w = wm.ptr;
  a.gathered = gathered_dev_.ptr;
  a.logits = logits_dev_.ptr;
  a.type = wm.type;
  a.x_rows = rows_;
  a.n = n;
  a.width = width;
  a.vocab = vocab;
  a.eps = eps;
  a.softcap = softcap;
  Run(
      "logits",
      {Rows(x),
       {a.picked, picked_bytes},
       {nd, FloatBytes(width)},
       {a.w, wm.bytes}},
      {{a.gathered, FloatBytes(n * width)}, {a.logits, FloatBytes(n * vocab)}},
      [a, wb = wm.bytes](dev::OpContext& c) {
        const float* xs = c.In<float>(a.x, a.x_rows * a.width);
        const int64_t* picked = c.In<int64_t>(a.picked, a.n);
        const float* w = c.In<float>(a.norm, a.width);
        float* g = c.Out<float>(a.gathered, a.n * a.width);
        for (int64_t j = 0; j < a.n; ++j) {
          cpu::RmsNorm(nullptr, xs + picked[j] * a.width, w, 1, a.width, a.eps,
                       g + j * a.width);
        }
        float* l = c.Out<float>(a.logits, a.n * a.vocab);
        cpu::MatMul(nullptr, a.type, c.In<uint8_t>(a.w, wb), a.width, a.vocab,
                    g, a.n, l);
        if (a.softcap > 0.0f) {
          cpu::SoftCap(nullptr, l, a.n * a.vocab, a.softcap);
        }
      },
      Kernel(&dev::OpLaunchers::Logits, a));
  Download(logits_dev_.ptr, FloatBytes(n * vocab), out->data());
}

void DeviceBackend::ReadRows(Activation a, std::vector<float>* out) {
  const Range r = Rows(a);
  out->assign(static_cast<size_t>(r.bytes / 4),
              std::numeric_limits<float>::quiet_NaN());
  if (ok()) Download(r.ptr, r.bytes, out->data());
}

bool DeviceBackend::Download(DevPtr src, int64_t bytes, float* out) {
  FlushDeferred();
  if (!GrowStaging(logits_stage_, bytes)) return false;
  if (debug_.host_reads_device_ptr &&
      !Ok(rt_->HostRead(reinterpret_cast<const void*>(src.addr), bytes))) {
    return false;
  }
  if (!Ok(rt_->CopyD2H(logits_stage_.host, src, bytes, stream_))) {
    return false;
  }
  if (!debug_.skip_sync_before_host_read && !Sync()) return false;
  if (!Ok(rt_->HostRead(logits_stage_.host, bytes))) return false;
  std::memcpy(out, logits_stage_.host, static_cast<size_t>(bytes));
  return true;
}

}  // namespace ckv
