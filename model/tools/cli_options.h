// Typed options of clusterkv-model, filled from its command-line flags.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "model/kv/kv_config.h"
#include "model/make_random.h"
#include "model/sampler.h"
#include "model/transformer.h"

namespace ckv {

struct CliOptions {
  std::string text_file;
  bool bos = false;
  bool parse_special = false;
  std::string tokens_file;
  std::string positions = "last";
  std::string prompt;
  std::string prompt_file;
  std::string out;
  kernels::DType kv_type = kernels::DType::kF16;
  int64_t max_context = 131072;
  SamplingParams sampling;
  TransformerOptions transformer;
  BackendKind backend = BackendKind::kAuto;  // --backend
  RandomModelSpec random;
  KvStoreConfig kv;  // policy == kFull: a dense cache of kv_type
  // CPU kernel set: auto|scalar|avx2|avx512|avx512_bf16 (kernels::cpu::SelectKernels);
  // scalar runs the reference path end to end.
  std::string kernels = "auto";
};

// Reads every flag (after absl::ParseCommandLine); INVALID_ARGUMENT on bad
// values.
absl::StatusOr<CliOptions> CliOptionsFromFlags();

// The tool's Transformer on o.backend (kAuto: logs its choice to stderr).
absl::StatusOr<std::unique_ptr<Transformer>> NewToolTransformer(
    const ModelConfig& config, const ModelWeights& weights,
    const CliOptions& o);

}  // namespace ckv
