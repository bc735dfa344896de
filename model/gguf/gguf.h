// GGUF (versions 2 and 3) reader: metadata of every value type, tensor infos,
// memory-mapped tensor data. Hostile files yield absl::Status errors: every
// count and length is checked against the bytes that remain before anything
// is allocated, and every tensor must lie inside the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/dtype.h"
#include "model/gguf/file_memory.h"

namespace ckv::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* ValueTypeName(ValueType t);
bool IsIntegerType(ValueType t);  // all signed/unsigned ints and bool
bool IsFloatType(ValueType t);

// A metadata value. Scalars: integers (and bool) in `i` (uint64 values keep
// their bit pattern), floats in `f`, strings in `s`. Arrays: elem_type plus
// exactly one of ints / floats / strings / arrays filled, by element type.
struct Value {
  ValueType type = ValueType::kUint8;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  ValueType elem_type = ValueType::kUint8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<Value> arrays;

  size_t array_size() const;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the contiguous (row) dimension
  kernels::DType type = kernels::DType::kF32;
  uint64_t offset = 0;            // relative to the data section
  const uint8_t* data = nullptr;  // inside the mapping
  int64_t n_elements = 0;
  int64_t n_bytes = 0;

  int64_t rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
};

struct ReaderLimits {
  uint64_t max_tensors = 1 << 16;
  uint64_t max_kv = 1 << 16;
  uint64_t max_string_bytes = 1 << 20;  // one string
  uint64_t max_array_elems = 1 << 24;
  int max_array_depth = 4;
  int max_dims = 4;
};

class GgufFile {
 public:
  // The file's bytes in memory as `memory` asks (file_memory.h: mapped
  // read-only, or copied into huge pages); they live as long as the
  // GgufFile.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path, const ReaderLimits& limits = {},
      FileMemory memory = FileMemory::kMap);
  // Parses a caller-owned buffer (it must outlive the result); for tests and
  // fuzzing.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBuffer(
      const uint8_t* data, size_t size, const ReaderLimits& limits = {});
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  // Where Open placed the bytes (kMap or kHugePages; kMap for FromBuffer).
  FileMemory memory() const { return bytes_.memory; }
  // Bytes Open placed (0 for FromBuffer).
  size_t placed_bytes() const { return bytes_.size; }

  const std::map<std::string, Value, std::less<>>& metadata() const {
    return kv_;
  }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* Find(absl::string_view key) const;
  bool Has(absl::string_view key) const { return Find(key) != nullptr; }
  const TensorInfo* FindTensor(absl::string_view name) const;

  // Typed getters: NOT_FOUND when absent, INVALID_ARGUMENT on a type that
  // does not convert (any integer type converts to int; any number to float).
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<const std::vector<std::string>*> GetStringArray(
      absl::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetIntArray(
      absl::string_view key) const;
  absl::StatusOr<const std::vector<double>*> GetFloatArray(
      absl::string_view key) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  FileBytes bytes_;  // owned when Open made them
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, Value, std::less<>> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace ckv::gguf
