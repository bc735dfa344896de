// The simple reference of Recognizer: every parse stack held as an
// explicit vector of positions in a std::set, no interning, no tail-call
// elision, no caches. Tests and the fuzzer compare Recognizer and
// Matcher::Mask against it; it is slow and for small inputs only.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "model/grammar/grammar.h"

namespace ckv::grammar {

class ReferenceRecognizer {
 public:
  explicit ReferenceRecognizer(const Grammar& g);
  // Consumes one byte; false (and no stacks left) when none accepts it.
  bool Feed(uint8_t byte);
  bool Accepting() const { return accepting_; }
  bool Alive() const { return accepting_ || !stacks_.empty(); }
  bool CanContinue() const { return !stacks_.empty(); }
  size_t num_stacks() const { return stacks_.size(); }

 private:
  void Close(std::vector<int32_t> stack, std::set<std::vector<int32_t>>* out,
             bool* accepting) const;

  const Grammar& g_;
  std::set<std::vector<int32_t>> stacks_;  // bottom .. top
  bool accepting_ = false;
};

}  // namespace ckv::grammar
