// The main() every benchmark program shares: usage, --foo-bar flag spelling,
// absl flag parsing, typed options (exit 2 on a bad flag value), then the
// run (exit 1 on error).
#pragma once

#include <cstdio>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flag_spelling.h"

namespace ckv::bench {

template <typename Options>
int BenchMain(int argc, char** argv, const char* usage,
              absl::StatusOr<Options> (*options_from_flags)(),
              absl::Status (*run)(const Options&)) {
  absl::SetProgramUsageMessage(usage);
  DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  auto options = options_from_flags();
  if (!options.ok()) {
    std::fprintf(stderr, "error: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (auto s = run(*options); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace ckv::bench
