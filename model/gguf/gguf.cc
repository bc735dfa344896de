#include "model/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckv::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

bool IsKnownValueType(uint32_t t) { return t <= 12; }

// Fixed byte size of a scalar value type; 0 for string/array.
uint64_t ScalarSize(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

// Smallest number of bytes one element of type t can occupy in the file.
uint64_t MinEncodedSize(ValueType t) {
  if (t == ValueType::kString) return 8;
  if (t == ValueType::kArray) return 12;
  return ScalarSize(t);
}

bool IsKnownTensorType(uint32_t t) { return kernels::IsKnownDType(t); }

}  // namespace

// Sequential, bounds-checked reader over the file bytes.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const ReaderLimits& limits)
      : data_(data), size_(size), limits_(limits) {}

  absl::Status Parse(GgufFile& out);

 private:
  size_t remaining() const { return size_ - pos_; }

  absl::Status Truncated(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF truncated while reading ", what, " at byte ", pos_,
                     " of ", size_));
  }

  template <typename T>
  absl::Status ReadPod(T& v, absl::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string& s, absl::string_view what);
  absl::Status ReadScalar(ValueType t, Value& v);
  absl::Status ReadArray(Value& v, int depth);
  absl::Status ReadValue(ValueType t, Value& v, int depth);
  absl::Status ReadHeader(GgufFile& out, uint64_t& n_tensors, uint64_t& n_kv);
  absl::Status ReadMetadata(GgufFile& out, uint64_t n_kv);
  absl::Status ReadTensorInfo(TensorInfo& t);
  absl::Status ResolveTensors(GgufFile& out);

  const uint8_t* data_;
  size_t size_;
  ReaderLimits limits_;
  size_t pos_ = 0;
  uint32_t version_ = 0;
};

absl::Status GgufParser::ReadString(std::string& s, absl::string_view what) {
  uint64_t len = 0;
  if (version_ == 1) return absl::InvalidArgumentError("GGUF v1 unsupported");
  if (auto st = ReadPod(len, what); !st.ok()) return st;
  if (len > limits_.max_string_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF string too long (", len, " bytes) in ", what));
  }
  if (len > remaining()) return Truncated(what);
  s.assign(reinterpret_cast<const char*>(data_ + pos_), len);
  pos_ += len;
  return absl::OkStatus();
}

absl::Status GgufParser::ReadScalar(ValueType t, Value& v) {
  const uint64_t n = ScalarSize(t);
  if (remaining() < n) return Truncated("metadata value");
  const uint8_t* p = data_ + pos_;
  pos_ += n;
  switch (t) {
    case ValueType::kUint8:
      v.i = p[0];
      break;
    case ValueType::kInt8:
      v.i = static_cast<int8_t>(p[0]);
      break;
    case ValueType::kBool:
      v.i = p[0] != 0;
      break;
    case ValueType::kUint16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      v.i = x;
      break;
    }
    case ValueType::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      v.i = x;
      break;
    }
    case ValueType::kUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      v.i = x;
      break;
    }
    case ValueType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      v.i = x;
      break;
    }
    case ValueType::kUint64:
    case ValueType::kInt64:
      std::memcpy(&v.i, p, 8);
      break;
    case ValueType::kFloat32: {
      float x;
      std::memcpy(&x, p, 4);
      v.f = x;
      break;
    }
    case ValueType::kFloat64:
      std::memcpy(&v.f, p, 8);
      break;
    default:
      return absl::InternalError("not a scalar type");
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadArray(Value& v, int depth) {
  if (depth >= limits_.max_array_depth) {
    return absl::InvalidArgumentError("GGUF arrays nested too deeply");
  }
  uint32_t et = 0;
  uint64_t count = 0;
  if (auto st = ReadPod(et, "array type"); !st.ok()) return st;
  if (!IsKnownValueType(et)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF unknown array element type ", et));
  }
  if (auto st = ReadPod(count, "array length"); !st.ok()) return st;
  v.elem_type = static_cast<ValueType>(et);
  if (count > limits_.max_array_elems ||
      count > remaining() / MinEncodedSize(v.elem_type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF array length ", count, " exceeds the file or the limit"));
  }
  Value elem;
  if (v.elem_type == ValueType::kString) {
    v.strings.resize(count);
    for (auto& s : v.strings) {
      if (auto st = ReadString(s, "string array"); !st.ok()) return st;
    }
  } else if (v.elem_type == ValueType::kArray) {
    v.arrays.resize(count);
    for (auto& a : v.arrays) {
      a.type = ValueType::kArray;
      if (auto st = ReadArray(a, depth + 1); !st.ok()) return st;
    }
  } else if (IsFloatType(v.elem_type)) {
    v.floats.resize(count);
    for (auto& f : v.floats) {
      if (auto st = ReadScalar(v.elem_type, elem); !st.ok()) return st;
      f = elem.f;
    }
  } else {
    v.ints.resize(count);
    for (auto& i : v.ints) {
      if (auto st = ReadScalar(v.elem_type, elem); !st.ok()) return st;
      i = elem.i;
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadValue(ValueType t, Value& v, int depth) {
  v.type = t;
  if (t == ValueType::kString) return ReadString(v.s, "string value");
  if (t == ValueType::kArray) return ReadArray(v, depth);
  return ReadScalar(t, v);
}

absl::Status GgufParser::ReadHeader(GgufFile& out, uint64_t& n_tensors,
                                    uint64_t& n_kv) {
  uint32_t magic = 0;
  if (auto st = ReadPod(magic, "magic"); !st.ok()) return st;
  if (magic != kMagic) {
    return absl::InvalidArgumentError("not a GGUF file (bad magic)");
  }
  if (auto st = ReadPod(version_, "version"); !st.ok()) return st;
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported GGUF version ", version_, " (need 2 or 3)"));
  }
  out.version_ = version_;
  if (auto st = ReadPod(n_tensors, "tensor count"); !st.ok()) return st;
  if (auto st = ReadPod(n_kv, "metadata count"); !st.ok()) return st;
  if (n_tensors > limits_.max_tensors || n_kv > limits_.max_kv) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF header counts are absurd: ", n_tensors, " tensors, ",
                     n_kv, " metadata entries"));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadMetadata(GgufFile& out, uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    uint32_t type = 0;
    if (auto st = ReadString(key, "metadata key"); !st.ok()) return st;
    if (auto st = ReadPod(type, "metadata type"); !st.ok()) return st;
    if (!IsKnownValueType(type)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GGUF metadata '", key, "' has unknown value type ", type));
    }
    Value v;
    if (auto st = ReadValue(static_cast<ValueType>(type), v, 0); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF metadata '", key, "': ", st.message()));
    }
    if (!out.kv_.try_emplace(key, std::move(v)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF metadata has a duplicate key '", key, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadTensorInfo(TensorInfo& t) {
  if (auto st = ReadString(t.name, "tensor name"); !st.ok()) return st;
  uint32_t n_dims = 0;
  if (auto st = ReadPod(n_dims, "tensor dims"); !st.ok()) return st;
  if (n_dims == 0 || n_dims > static_cast<uint32_t>(limits_.max_dims)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has ", n_dims, " dimensions"));
  }
  t.dims.resize(n_dims);
  int64_t n = 1;
  for (auto& d : t.dims) {
    uint64_t dim = 0;
    if (auto st = ReadPod(dim, "tensor shape"); !st.ok()) return st;
    if (dim == 0 || dim > (uint64_t{1} << 40) ||
        static_cast<uint64_t>(n) > (uint64_t{1} << 42) / dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' has an absurd shape"));
    }
    d = static_cast<int64_t>(dim);
    n *= d;
  }
  t.n_elements = n;
  uint32_t type = 0;
  if (auto st = ReadPod(type, "tensor type"); !st.ok()) return st;
  if (!IsKnownTensorType(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", t.name, "' has unsupported type ", type,
        " (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
        "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)"));
  }
  t.type = static_cast<kernels::DType>(type);
  const int64_t row_bytes = kernels::RowBytes(t.type, t.dims[0]);
  if (row_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' row length ", t.dims[0],
                     " is not a multiple of the block size of ",
                     kernels::DTypeName(t.type)));
  }
  t.n_bytes = row_bytes * (n / t.dims[0]);
  return ReadPod(t.offset, "tensor offset");
}

absl::Status GgufParser::ResolveTensors(GgufFile& out) {
  const uint64_t align = out.alignment_;
  const uint64_t data_start = (pos_ + align - 1) / align * align;
  if (data_start > size_ && !out.tensors_.empty()) {
    return Truncated("tensor data");
  }
  for (size_t i = 0; i < out.tensors_.size(); ++i) {
    TensorInfo& t = out.tensors_[i];
    if (t.offset % align != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' offset is not aligned"));
    }
    const uint64_t avail = size_ - data_start;
    if (t.offset > avail ||
        static_cast<uint64_t>(t.n_bytes) > avail - t.offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' lies outside the file (offset ", t.offset,
          ", ", t.n_bytes, " bytes, data section ", avail, " bytes)"));
    }
    t.data = data_ + data_start + t.offset;
    if (!out.tensor_index_.emplace(t.name, i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name '", t.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status GgufParser::Parse(GgufFile& out) {
  uint64_t n_tensors = 0, n_kv = 0;
  if (auto st = ReadHeader(out, n_tensors, n_kv); !st.ok()) return st;
  if (auto st = ReadMetadata(out, n_kv); !st.ok()) return st;
  if (const Value* a = out.Find("general.alignment")) {
    if (!IsIntegerType(a->type) || a->i <= 0 || a->i > (1 << 20) ||
        (a->i & (a->i - 1)) != 0) {
      return absl::InvalidArgumentError(
          "general.alignment must be a power of two");
    }
    out.alignment_ = static_cast<uint64_t>(a->i);
  }
  // Each tensor info takes at least 8+4+8+4+8 bytes.
  if (n_tensors > remaining() / 32) return Truncated("tensor infos");
  out.tensors_.resize(n_tensors);
  for (auto& t : out.tensors_) {
    if (auto st = ReadTensorInfo(t); !st.ok()) return st;
  }
  return ResolveTensors(out);
}

// ------------------------------------------------------------------ Value

size_t Value::array_size() const {
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

const char* ValueTypeName(ValueType t) {
  static const char* kNames[] = {
      "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
      "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

bool IsIntegerType(ValueType t) {
  return t != ValueType::kFloat32 && t != ValueType::kFloat64 &&
         t != ValueType::kString && t != ValueType::kArray;
}

bool IsFloatType(ValueType t) {
  return t == ValueType::kFloat32 || t == ValueType::kFloat64;
}

// ---------------------------------------------------------------- GgufFile

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(
    const uint8_t* data, size_t size, const ReaderLimits& limits) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  GgufParser parser(data, size, limits);
  if (auto st = parser.Parse(*file); !st.ok()) return st;
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(
    const std::string& path, const ReaderLimits& limits, FileMemory memory) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat rejects it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  const size_t size = static_cast<size_t>(sb.st_size);
  auto bytes = PlaceFileBytes(fd, size, memory);
  ::close(fd);
  if (!bytes.ok()) {
    return absl::Status(
        bytes.status().code(),
        absl::StrCat("'", path, "': ", bytes.status().message()));
  }
  auto file =
      FromBuffer(static_cast<const uint8_t*>(bytes->data), size, limits);
  if (!file.ok()) {
    ReleaseFileBytes(*bytes);
    return absl::Status(file.status().code(),
                        absl::StrCat(path, ": ", file.status().message()));
  }
  (*file)->path_ = path;
  (*file)->bytes_ = *bytes;
  return file;
}

GgufFile::~GgufFile() { ReleaseFileBytes(bytes_); }

const Value* GgufFile::Find(absl::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
absl::Status Missing(absl::string_view key) {
  return absl::NotFoundError(absl::StrCat("missing GGUF key '", key, "'"));
}
absl::Status WrongType(absl::string_view key, const Value& v,
                       absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(
      "GGUF key '", key, "' is ", ValueTypeName(v.type), ", expected ", want));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != ValueType::kString) return WrongType(key, *v, "string");
  return v->s;
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (!IsIntegerType(v->type)) return WrongType(key, *v, "integer");
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (IsFloatType(v->type)) return v->f;
  if (IsIntegerType(v->type)) return static_cast<double>(v->i);
  return WrongType(key, *v, "number");
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (!IsIntegerType(v->type)) return WrongType(key, *v, "bool");
  return v->i != 0;
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStringArray(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != ValueType::kArray || v->elem_type != ValueType::kString) {
    return WrongType(key, *v, "array of strings");
  }
  return &v->strings;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetIntArray(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != ValueType::kArray || !IsIntegerType(v->elem_type)) {
    return WrongType(key, *v, "array of integers");
  }
  return &v->ints;
}

absl::StatusOr<const std::vector<double>*> GgufFile::GetFloatArray(
    absl::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != ValueType::kArray || !IsFloatType(v->elem_type)) {
    return WrongType(key, *v, "array of floats");
  }
  return &v->floats;
}

}  // namespace ckv::gguf
