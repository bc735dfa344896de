// The architectures the engine runs (model/arch/arch.cc's table, through
// SupportedArchs) and the tiny make-random shape the per-architecture suites
// test them on: a row added to the table is tested by every suite that
// iterates EngineArchs().
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "kernels/dtype.h"
#include "model/arch/arch.h"
#include "model/make_random.h"

namespace ckv::testing {

inline std::vector<std::string> EngineArchs() {
  return absl::StrSplit(SupportedArchs(), ", ");
}

// 3 layers, d 64, 4 heads over 2 KV heads, ffn 96; qwen3 with head_dim 24
// (q_dim != d); sliding windows of 8 on every 2nd layer (gemma3: 3rd).
inline RandomModelSpec TinyArchSpec(const std::string& arch,
                                    kernels::DType dtype) {
  RandomModelSpec s;
  s.arch = arch;
  s.layers = 3;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 96;
  s.dtype = dtype;
  s.rope_freq_base = 10000.0f;
  if (arch == "qwen3") s.head_dim = 24;
  s.sliding_window = 8;
  s.sliding_window_pattern = arch == "gemma3" ? 3 : 2;
  return s;
}

}  // namespace ckv::testing
