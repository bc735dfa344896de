// Helpers shared by model tests: temp files, random models, fixture paths.
#pragma once

#include <filesystem>
#include <string>

#include "model/make_random.h"

namespace ckv::testing {

inline std::string FixturesDir() { return CLUSTERKV_FIXTURES_DIR; }
inline bool HaveFixtures() {
  return std::filesystem::exists(FixturesDir() + "/models");
}

// A fresh path under the test temp dir.
inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::filesystem::path p = dir ? dir : std::filesystem::temp_directory_path();
  p /= "ckv_" + std::to_string(::getpid()) + "_" + name;
  return p.string();
}

// Writes a random model once per process per name; returns its path.
std::string RandomModelPath(const std::string& name,
                            const RandomModelSpec& spec);

}  // namespace ckv::testing
