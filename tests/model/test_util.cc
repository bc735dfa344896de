#include "tests/model/test_util.h"

#include <map>
#include <stdexcept>

namespace ckv::testing {

std::string RandomModelPath(const std::string& name,
                            const RandomModelSpec& spec) {
  static std::map<std::string, std::string>* made =
      new std::map<std::string, std::string>();
  auto it = made->find(name);
  if (it != made->end()) return it->second;
  const std::string path = TempPath(name + ".gguf");
  const absl::Status s = WriteRandomModel(spec, path);
  if (!s.ok()) throw std::runtime_error(std::string(s.message()));
  (*made)[name] = path;
  return path;
}

}  // namespace ckv::testing
