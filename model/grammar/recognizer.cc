#include "model/grammar/recognizer.h"

#include <algorithm>
#include <utility>

namespace ckv::grammar {
namespace {

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
         static_cast<uint32_t>(b);
}

}  // namespace

Recognizer::Recognizer(std::shared_ptr<const Grammar> grammar,
                       const GrammarLimits& limits, int32_t marker_pos)
    : g_(std::move(grammar)), limits_(limits), marker_pos_(marker_pos) {
  // Partition refinement of the 256 bytes by every byte set.
  std::array<int, 256> cls{};
  int num = 1;
  std::vector<int> split;
  for (const auto& set : g_->byte_sets) {
    split.assign(num * 2, -1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const int in = (set[b >> 6] >> (b & 63)) & 1;
      int& id = split[cls[b] * 2 + in];
      if (id < 0) id = next++;
      cls[b] = id;
    }
    num = next;
  }
  class_bytes_.resize(num);
  for (int b = 0; b < 256; ++b) {
    class_of_[b] = static_cast<uint8_t>(cls[b]);
    class_bytes_[cls[b]].push_back(static_cast<uint8_t>(b));
  }
  Reset();
}

void Recognizer::Reset() {
  nodes_.clear();
  node_ids_.clear();
  states_.clear();
  state_ids_.clear();
  tables_.clear();
  sparse_.clear();
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  for (int32_t alt : g_->rule_alternatives[g_->root]) Expand(alt, -1);
  start_ = InternState();
}

int32_t Recognizer::Intern(int32_t pos, int32_t parent) {
  auto [it, inserted] = node_ids_.try_emplace(
      Key(pos, parent), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

void Recognizer::Expand(int32_t pos, int32_t parent) {
  const auto& el = g_->elements;
  work_.clear();
  work_.emplace_back(pos, parent);
  while (!work_.empty()) {
    auto [p, par] = work_.back();
    work_.pop_back();
    if (!visited_.insert(Key(p, par)).second) continue;
    const int32_t e = el[p];
    if (e == kEnd) {
      if (par < 0) {
        scratch_accepting_ = true;
      } else {
        work_.emplace_back(nodes_[par].pos, nodes_[par].parent);
      }
    } else if (Grammar::IsRef(e)) {
      // Tail call: returning to (p + 1 = kEnd, par) just pops to par.
      const int32_t ret = el[p + 1] == kEnd ? par : Intern(p + 1, par);
      for (int32_t alt : g_->rule_alternatives[e]) work_.emplace_back(alt, ret);
    } else {
      scratch_.push_back(Intern(p, par));
    }
  }
}

Recognizer::State Recognizer::InternState() {
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  if (scratch_.size() > static_cast<size_t>(limits_.max_stacks)) {
    overflowed_ = true;
    scratch_.clear();
    scratch_accepting_ = false;
  }
  State result = kDead;
  if (!scratch_.empty() || scratch_accepting_) {
    key_.clear();
    if (scratch_accepting_) key_.push_back(-1);
    key_.insert(key_.end(), scratch_.begin(), scratch_.end());
    auto it = state_ids_.find(key_);
    if (it != state_ids_.end()) {
      result = it->second;
    } else {
      result = static_cast<State>(states_.size());
      state_ids_.emplace(key_, result);
      bool marked = false;
      for (int32_t id : scratch_) marked |= nodes_[id].pos == marker_pos_;
      states_.push_back({scratch_, scratch_accepting_, marked, nullptr});
    }
  }
  scratch_.clear();
  scratch_accepting_ = false;
  visited_.clear();
  return result;
}

Recognizer::State Recognizer::Compute(State s, uint8_t byte) {
  // Copy: Expand may grow states_ no further, but nodes_ grows.
  for (int32_t id : states_[s].stacks) {
    const Node n = nodes_[id];
    if (g_->Matches(g_->elements[n.pos], byte)) Expand(n.pos + 1, n.parent);
  }
  return InternState();
}

const int32_t* Recognizer::NewRow(State s) {
  if (tables_.size() >= static_cast<size_t>(limits_.max_states)) {
    return nullptr;
  }
  tables_.emplace_back();
  tables_.back().fill(kUnknown);
  states_[s].row = tables_.back().data();
  return states_[s].row;
}

Recognizer::State Recognizer::Step(State s, uint8_t byte) {
  if (s == kDead) return kDead;
  if (Row(s) != nullptr) {
    if (states_[s].row[byte] != kUnknown) return states_[s].row[byte];
    const State next = Compute(s, byte);
    int32_t* row = states_[s].row;  // Compute may add states, not rows
    for (uint8_t b : class_bytes_[class_of_[byte]]) row[b] = next;
    return next;
  }
  auto it = sparse_.find(Key(s, byte));
  if (it != sparse_.end()) return it->second;
  const State next = Compute(s, byte);
  sparse_.emplace(Key(s, byte), next);
  return next;
}

bool Recognizer::NeedsCompaction() const {
  return nodes_.size() > static_cast<size_t>(limits_.max_stack_nodes) ||
         states_.size() > static_cast<size_t>(limits_.max_states) * 2 ||
         sparse_.size() > static_cast<size_t>(limits_.max_states) * 64;
}

Recognizer::State Recognizer::FromStacks(
    const std::vector<std::vector<int32_t>>& stacks, bool accepting) {
  for (const auto& positions : stacks) {
    int32_t node = -1;
    for (auto it = positions.rbegin(); it != positions.rend(); ++it) {
      node = Intern(*it, node);
    }
    scratch_.push_back(node);
  }
  scratch_accepting_ = accepting;
  return InternState();
}

Recognizer::State Recognizer::Compact(State s) {
  // Each stack of `s` as its positions, top first.
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t id : states_[s].stacks) {
    std::vector<int32_t> positions;
    for (int32_t n = id; n >= 0; n = nodes_[n].parent) {
      positions.push_back(nodes_[n].pos);
    }
    stacks.push_back(std::move(positions));
  }
  const bool accepting = states_[s].accepting;
  Reset();
  return FromStacks(stacks, accepting);
}

}  // namespace ckv::grammar
