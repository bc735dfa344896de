// libFuzzer target for the GGUF reader: any input must either parse into a
// file whose tensors all lie inside the input, or fail with
// INVALID_ARGUMENT and a non-empty message. Every tensor byte and every
// metadata value of a parsed file is touched, so ASan sees any bad pointer.
//
// Seeds: when CLUSTERKV_FUZZ_SEED_DIR names a folder, LLVMFuzzerInitialize
// writes a few small valid GGUF files there (see scripts/fuzz.sh, which
// passes the same folder as the corpus).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "kernels/dtype.h"
#include "model/gguf/gguf.h"
#include "model/gguf/gguf_writer.h"

namespace {

using ckv::gguf::GgufFile;
using ckv::gguf::GgufWriter;
using ckv::gguf::TensorInfo;
using ckv::gguf::Value;
using ckv::gguf::ValueType;
using ckv::kernels::DType;

// Fails the run (libFuzzer reports the crash with the input).
void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzzer invariant violated: %s\n", what);
    std::abort();
  }
}

volatile uint64_t g_sink;

uint64_t TouchValue(const Value& v) {
  uint64_t h = static_cast<uint64_t>(v.i) ^ static_cast<uint64_t>(v.type);
  h += v.s.size() + (v.s.empty() ? 0 : static_cast<uint8_t>(v.s.back()));
  for (int64_t x : v.ints) h = h * 31 + static_cast<uint64_t>(x);
  for (double f : v.floats) h += std::isnan(f) ? 1 : 2;
  for (const auto& s : v.strings) h = h * 31 + s.size();
  for (const auto& a : v.arrays) h ^= TouchValue(a);
  return h;
}

// Decodes every row of a block-type tensor with the reference and the fast
// dequantiser: arbitrary block bytes (NaN/inf scales, any code) must decode
// without reading outside the tensor.
uint64_t DecodeRows(const TensorInfo& t) {
  const int64_t row_bytes = ckv::kernels::RowBytes(t.type, t.dims[0]);
  std::vector<float> a(t.dims[0]), b(t.dims[0]);
  uint64_t h = 0;
  for (int64_t r = 0; r < t.rows(); ++r) {
    const uint8_t* row = t.data + r * row_bytes;
    ckv::kernels::ref::DequantizeRow(t.type, row, t.dims[0], a.data());
    ckv::kernels::cpu::DequantizeRow(t.type, row, t.dims[0], b.data());
    for (int64_t i = 0; i < t.dims[0]; ++i)
      h += (a[i] == b[i]) + std::isnan(b[i]);
  }
  return h;
}

void Exercise(const GgufFile& f, const uint8_t* data, size_t size) {
  Check(f.version() == 2 || f.version() == 3, "version");
  const uint64_t align = f.alignment();
  Check(align > 0 && (align & (align - 1)) == 0, "alignment");
  uint64_t h = 0;
  for (const auto& [key, v] : f.metadata()) {
    h ^= TouchValue(v);
    Check(f.Find(key) == &v, "Find");
    // Getters must answer OK or a clean error for every key and type.
    h += f.GetString(key).ok() + f.GetInt(key).ok() + f.GetFloat(key).ok() +
         f.GetBool(key).ok() + f.GetStringArray(key).ok() +
         f.GetIntArray(key).ok() + f.GetFloatArray(key).ok();
  }
  for (const TensorInfo& t : f.tensors()) {
    Check(f.FindTensor(t.name) == &t, "FindTensor");
    Check(!t.dims.empty() && t.dims[0] > 0, "dims");
    int64_t n = 1;
    for (int64_t d : t.dims) {
      Check(d > 0, "dim > 0");
      n *= d;
    }
    Check(n == t.n_elements, "n_elements");
    const int64_t row = ckv::kernels::RowBytes(t.type, t.dims[0]);
    Check(row > 0 && row * t.rows() == t.n_bytes, "n_bytes");
    Check(t.offset % align == 0, "offset alignment");
    Check(t.data >= data && t.n_bytes >= 0 &&
              static_cast<uint64_t>(t.n_bytes) <=
                  static_cast<uint64_t>(data + size - t.data),
          "tensor inside the input");
    for (int64_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
    if (ckv::kernels::IsQuantized(t.type)) h += DecodeRows(t);
  }
  g_sink = h;
}

Value ArrayOf(ValueType elem) {
  Value v;
  v.type = ValueType::kArray;
  v.elem_type = elem;
  return v;
}

std::vector<uint8_t> Fill(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
  return b;
}

// Small valid files covering every value type and tensor type.
std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> out;
  out.push_back(GgufWriter().Serialize());

  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetInt32("llama.context_length", 64);
  w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "a", "bc"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, 0, -1, -2});
  w.SetInt32Array("tokenizer.ggml.token_type", {2, 3, 1, 1});
  const ValueType scalars[] = {ValueType::kUint8,  ValueType::kInt8,
                               ValueType::kUint16, ValueType::kInt16,
                               ValueType::kUint64, ValueType::kInt64};
  for (ValueType t : scalars) {
    Value v;
    v.type = t;
    v.i = -1;
    w.Set("int." + std::string(ckv::gguf::ValueTypeName(t)), v);
    Value a = ArrayOf(t);
    a.ints = {1, -1};
    w.Set("arr." + std::string(ckv::gguf::ValueTypeName(t)), a);
  }
  Value f64;
  f64.type = ValueType::kFloat64;
  f64.f = 0.5;
  w.Set("f64", f64);
  Value nested = ArrayOf(ValueType::kArray);
  nested.arrays = {ArrayOf(ValueType::kInt32), ArrayOf(ValueType::kString)};
  nested.arrays[0].ints = {1, 2};
  nested.arrays[1].strings = {"x"};
  w.Set("nested", nested);
  out.push_back(w.Serialize());

  for (uint64_t align : {32u, 64u}) {
    GgufWriter t(align);
    if (align != 32) t.SetUint32("general.alignment", align);
    t.AddTensor("f32", {4, 2}, DType::kF32, Fill(32));
    t.AddTensor("f16", {3}, DType::kF16, Fill(6));
    t.AddTensor("bf16", {2, 2, 2}, DType::kBF16, Fill(16));
    t.AddTensor("q8_0", {32, 1}, DType::kQ8_0, Fill(34));
    out.push_back(t.Serialize());
  }
  // One small tensor of every block type (two rows of one block).
  GgufWriter q;
  for (uint32_t id = 2; id < 30; ++id) {
    if (!ckv::kernels::IsKnownDType(id)) continue;
    const auto type = static_cast<DType>(id);
    if (!ckv::kernels::IsQuantized(type)) continue;
    const int64_t block = ckv::kernels::BlockSize(type);
    q.AddTensor(ckv::kernels::DTypeName(type), {block, 2}, type,
                Fill(2 * ckv::kernels::BlockBytes(type)));
  }
  out.push_back(q.Serialize());
  std::vector<uint8_t> v2 = out.back();
  v2[4] = 2;  // version 2 has the v3 layout
  out.push_back(v2);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("CLUSTERKV_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  const auto seeds = Seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const std::string path =
        std::string(dir) + "/gguf_seed_" + std::to_string(i) + ".gguf";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) continue;  // the fuzzer still runs, just unseeded
    std::fwrite(seeds[i].data(), 1, seeds[i].size(), f);
    std::fclose(f);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::FromBuffer(data, size);
  if (file.ok()) {
    Exercise(**file, data, size);
  } else {
    Check(file.status().code() == absl::StatusCode::kInvalidArgument,
          "error code is INVALID_ARGUMENT");
    Check(!file.status().message().empty(), "error message");
  }
  return 0;
}
