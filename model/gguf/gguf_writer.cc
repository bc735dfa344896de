#include "model/gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ckv::gguf {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void Pod(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    const size_t at = out_.size();
    out_.resize(at + s.size());
    if (!s.empty()) std::memcpy(out_.data() + at, s.data(), s.size());
  }
  void PadTo(uint64_t align) {
    while (out_.size() % align != 0) out_.push_back(0);
  }

 private:
  std::vector<uint8_t>& out_;
};

void WriteScalar(ByteSink& w, ValueType t, const Value& v) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kBool: w.Pod<uint8_t>(static_cast<uint8_t>(v.i)); break;
    case ValueType::kInt8: w.Pod<int8_t>(static_cast<int8_t>(v.i)); break;
    case ValueType::kUint16: w.Pod<uint16_t>(static_cast<uint16_t>(v.i)); break;
    case ValueType::kInt16: w.Pod<int16_t>(static_cast<int16_t>(v.i)); break;
    case ValueType::kUint32: w.Pod<uint32_t>(static_cast<uint32_t>(v.i)); break;
    case ValueType::kInt32: w.Pod<int32_t>(static_cast<int32_t>(v.i)); break;
    case ValueType::kUint64:
    case ValueType::kInt64: w.Pod<int64_t>(v.i); break;
    case ValueType::kFloat32: w.Pod<float>(static_cast<float>(v.f)); break;
    case ValueType::kFloat64: w.Pod<double>(v.f); break;
    case ValueType::kString: w.Str(v.s); break;
    case ValueType::kArray: break;
  }
}

void WriteArray(ByteSink& w, const Value& v) {
  w.Pod<uint32_t>(static_cast<uint32_t>(v.elem_type));
  w.Pod<uint64_t>(v.array_size());
  Value e;
  for (const auto& s : v.strings) w.Str(s);
  for (const auto& a : v.arrays) WriteArray(w, a);
  for (double f : v.floats) {
    e.f = f;
    WriteScalar(w, v.elem_type, e);
  }
  for (int64_t i : v.ints) {
    e.i = i;
    WriteScalar(w, v.elem_type, e);
  }
}

Value ArrayOf(ValueType elem) {
  Value v;
  v.type = ValueType::kArray;
  v.elem_type = elem;
  return v;
}

}  // namespace

void GgufWriter::Set(const std::string& key, Value value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::SetString(const std::string& key, std::string s) {
  Value v;
  v.type = ValueType::kString;
  v.s = std::move(s);
  Set(key, std::move(v));
}

void GgufWriter::SetUint32(const std::string& key, uint32_t x) {
  Value v;
  v.type = ValueType::kUint32;
  v.i = x;
  Set(key, std::move(v));
}

void GgufWriter::SetInt32(const std::string& key, int32_t x) {
  Value v;
  v.type = ValueType::kInt32;
  v.i = x;
  Set(key, std::move(v));
}

void GgufWriter::SetFloat32(const std::string& key, float x) {
  Value v;
  v.type = ValueType::kFloat32;
  v.f = x;
  Set(key, std::move(v));
}

void GgufWriter::SetBool(const std::string& key, bool x) {
  Value v;
  v.type = ValueType::kBool;
  v.i = x;
  Set(key, std::move(v));
}

void GgufWriter::SetStringArray(const std::string& key,
                                std::vector<std::string> x) {
  Value v = ArrayOf(ValueType::kString);
  v.strings = std::move(x);
  Set(key, std::move(v));
}

void GgufWriter::SetFloat32Array(const std::string& key,
                                 std::vector<double> x) {
  Value v = ArrayOf(ValueType::kFloat32);
  v.floats = std::move(x);
  Set(key, std::move(v));
}

void GgufWriter::SetInt32Array(const std::string& key,
                               std::vector<int64_t> x) {
  Value v = ArrayOf(ValueType::kInt32);
  v.ints = std::move(x);
  Set(key, std::move(v));
}

void GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> dims,
                           kernels::DType type, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, std::move(dims), type, std::move(bytes)});
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  ByteSink w(out);
  w.Pod<uint32_t>(0x46554747);  // "GGUF"
  w.Pod<uint32_t>(3);
  w.Pod<uint64_t>(tensors_.size());
  w.Pod<uint64_t>(kv_.size());
  for (const auto& [key, v] : kv_) {
    w.Str(key);
    w.Pod<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type == ValueType::kArray) {
      WriteArray(w, v);
    } else {
      WriteScalar(w, v.type, v);
    }
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    w.Str(t.name);
    w.Pod<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) w.Pod<uint64_t>(static_cast<uint64_t>(d));
    w.Pod<uint32_t>(static_cast<uint32_t>(t.type));
    w.Pod<uint64_t>(offset);
    offset += (t.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  w.PadTo(alignment_);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    w.PadTo(alignment_);
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = Serialize();
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno)));
  }
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = n == bytes.size() && std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("writing '", path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace ckv::gguf
