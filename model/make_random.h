// Writes a valid Llama GGUF with random weights: the demo model, and the
// models of tests and benchmarks. Deterministic for a given spec.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace ckv {

struct RandomModelSpec {
  int layers = 2;
  int dim = 256;
  int heads = 8;
  int kv_heads = 2;
  int ffn = 704;
  // "byte": a 259-token byte vocabulary (<unk>, <s>, </s>, <0x00>..<0xFF>);
  // otherwise the path of a GGUF whose tokenizer.* metadata is copied.
  std::string vocab = "byte";
  kernels::DType dtype = kernels::DType::kF16;  // matrices; norms stay F32
  uint64_t seed = 1;
  int context_length = 131072;
  float rope_freq_base = 500000.0f;
  bool rope_freqs = false;  // add Llama-3 style rope_freqs.weight factors
  std::string arch = "llama";    // or "qwen2" (QKV biases, NeoX RoPE)
  bool tied_embeddings = false;  // omit output.weight
};

absl::Status WriteRandomModel(const RandomModelSpec& spec,
                              const std::string& out_path);

}  // namespace ckv
