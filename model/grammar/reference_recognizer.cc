#include "model/grammar/reference_recognizer.h"

#include <utility>

namespace ckv::grammar {

ReferenceRecognizer::ReferenceRecognizer(const Grammar& g) : g_(g) {
  for (int32_t alt : g_.rule_alternatives[g_.root]) {
    Close({alt}, &stacks_, &accepting_);
  }
}

// Processes the top until it is a byte set: kEnd pops (and the caller's
// reference position moves past it), a reference pushes each alternative.
void ReferenceRecognizer::Close(std::vector<int32_t> stack,
                                std::set<std::vector<int32_t>>* out,
                                bool* accepting) const {
  const int32_t e = g_.elements[stack.back()];
  if (e == kEnd) {
    stack.pop_back();
    if (stack.empty()) {
      *accepting = true;
      return;
    }
    ++stack.back();
    Close(std::move(stack), out, accepting);
  } else if (Grammar::IsRef(e)) {
    for (int32_t alt : g_.rule_alternatives[e]) {
      std::vector<int32_t> s = stack;
      s.push_back(alt);
      Close(std::move(s), out, accepting);
    }
  } else {
    out->insert(std::move(stack));
  }
}

bool ReferenceRecognizer::Feed(uint8_t byte) {
  std::set<std::vector<int32_t>> next;
  bool accepting = false;
  for (const auto& s : stacks_) {
    if (!g_.Matches(g_.elements[s.back()], byte)) continue;
    std::vector<int32_t> t = s;
    ++t.back();
    Close(std::move(t), &next, &accepting);
  }
  stacks_ = std::move(next);
  accepting_ = accepting;
  return Alive();
}

}  // namespace ckv::grammar
