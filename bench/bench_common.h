// Helpers shared by the benchmark programs (engine_bench, cluster_bench,
// service_bench): model specs, flag spelling, list parsing, the cached random
// model, timestamps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_spelling.h"
#include "kernels/dtype.h"
#include "model/make_random.h"

namespace ckv::bench {

// The default benchmark model: 4 layers, d 512, 8 query / 2 KV heads, ffn
// 1536, F16 matrices, the Llama-3 vocabulary (128k tokens) of the tokenizer
// fixtures (tests/fixtures/tokenizer/).
RandomModelSpec DefaultModelSpec();
// The --quick model: 2 layers, d 64, byte vocabulary.
RandomModelSpec QuickModelSpec();

using ::ckv::DashesToUnderscores;  // common/flag_spelling.h

// File name that identifies a random model's spec, so that a cached file of
// another shape is never reused.
std::string RandomModelName(const RandomModelSpec& spec);

// Writes the random model into `work_dir` unless it is already there;
// returns its path. `program` prefixes the progress line on stderr.
absl::StatusOr<std::string> EnsureRandomModel(const RandomModelSpec& spec,
                                              const std::string& work_dir,
                                              const char* program);

// Current UTC time as 2024-01-02T03:04:05Z.
std::string UtcTimestamp();

// A weight matrix of n_out rows of n_in random values in [-1, 1] (a fixed
// seed: the same matrix in every run), stored as type t.
std::vector<uint8_t> RandomWeightMatrix(kernels::DType t, int64_t n_out,
                                        int64_t n_in);

// seconds[f][i]: the time of fns[f] in round i of `reps`; every round runs
// each fn once, in turn, after one warm-up call of each, so that load from
// other processes falls on all of them alike.
std::vector<std::vector<double>> TimeInterleaved(
    int reps, const std::vector<std::function<void()>>& fns);

// Writes `text` to `path`, creating the parent directory.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// A comma-separated list of integers >= min; INVALID_ARGUMENT naming --flag.
template <typename T>
absl::StatusOr<std::vector<T>> ParseList(const std::string& flag,
                                         const std::string& text, T min) {
  std::vector<T> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    if (!absl::SimpleAtoi(part, &v) || v < min) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not an integer >= ", min));
    }
    out.push_back(v);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  }
  return out;
}

// Whether a flag was set to something other than its default (this abseil
// cannot tell whether a flag was given on the command line).
template <typename T>
bool Changed(const absl::Flag<T>& flag) {
  const absl::CommandLineFlag& f = absl::GetFlagReflectionHandle(flag);
  return f.CurrentValue() != f.DefaultValue();
}

}  // namespace ckv::bench
