// Writes GGUF v3 files: metadata of every value type and aligned tensor data.
// Used by `clusterkv-model make-random` and by tests that build tiny models
// or deliberately corrupt files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/gguf/gguf.h"

namespace ckv::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Metadata, in insertion order. A key set twice keeps the last value.
  void Set(const std::string& key, Value value);
  void SetString(const std::string& key, std::string s);
  void SetUint32(const std::string& key, uint32_t v);
  void SetInt32(const std::string& key, int32_t v);
  void SetFloat32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetStringArray(const std::string& key, std::vector<std::string> v);
  void SetFloat32Array(const std::string& key, std::vector<double> v);
  void SetInt32Array(const std::string& key, std::vector<int64_t> v);

  // Tensor with dims (dims[0] contiguous) and raw bytes of type `type`.
  void AddTensor(const std::string& name, std::vector<int64_t> dims,
                 kernels::DType type, std::vector<uint8_t> bytes);

  // The whole file as bytes.
  std::vector<uint8_t> Serialize() const;
  // Writes atomically (temp file + rename).
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    kernels::DType type;
    std::vector<uint8_t> bytes;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ckv::gguf
