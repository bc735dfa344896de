// The pushdown recogniser of a Grammar over bytes, determinised lazily.
//
// A parse configuration is a stack of grammar positions (top: the byte set
// to match next; below: where each open rule continues). Stacks are
// interned as (position, parent) nodes, so shared tails are stored once; a
// rule reference in tail position pushes nothing (right recursion such as
// x* runs in constant stack depth). A State is the set of live stacks
// after some input, plus whether the input so far is a complete sentence;
// states and their byte transitions are cached, so replaying a byte from a
// state seen before costs one table lookup.
//
// Memory is bounded by GrammarLimits: a state with more than max_stacks
// stacks is dead (Overflowed() tells); Compact() rebuilds the caches from
// one state when they exceed max_stack_nodes / max_states.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "model/grammar/grammar.h"

namespace ckv::grammar {

class Recognizer {
 public:
  using State = int32_t;
  static constexpr State kDead = -1;
  static constexpr State kUnknown = -2;  // a table entry not computed yet

  // `marker_pos` (optional): a position whose stacks mark their state
  // (Marked()); MaskIndex uses it for the bottom of truncated stacks.
  Recognizer(std::shared_ptr<const Grammar> grammar,
             const GrammarLimits& limits, int32_t marker_pos = -1);

  State Start() const { return start_; }
  // The state after `byte`, or kDead when no stack accepts it.
  State Step(State s, uint8_t byte);
  // The dense transition row of `s` (kUnknown where not computed; Step
  // fills it), or null when the table budget (max_states) is spent. Rows
  // stay valid until Compact.
  const int32_t* Row(State s) {
    const int32_t* row = states_[s].row;
    return row != nullptr ? row : NewRow(s);
  }
  // The input so far is a sentence of the grammar.
  bool Accepting(State s) const { return states_[s].accepting; }
  // Some continuation is possible (a byte can follow).
  bool CanContinue(State s) const { return !states_[s].stacks.empty(); }

  // True when the caches are over their limits; Compact(s) then keeps
  // only what `s` needs and returns s's new id (other ids are invalid).
  bool NeedsCompaction() const;
  State Compact(State s);
  // A state was cut off at max_stacks (the grammar is too ambiguous).
  bool Overflowed() const { return overflowed_; }
  size_t num_states() const { return states_.size(); }
  // Some stack of `s` has marker_pos on top.
  bool Marked(State s) const { return states_[s].marked; }

  // The stacks of `s`: node ids, each a (position, parent node) pair with
  // parent -1 at the bottom. Valid until Compact.
  const std::vector<int32_t>& Stacks(State s) const {
    return states_[s].stacks;
  }
  int32_t NodePos(int32_t node) const { return nodes_[node].pos; }
  int32_t NodeParent(int32_t node) const { return nodes_[node].parent; }
  // The state whose stacks are `stacks` (each its positions, top first;
  // every top a byte-set position) plus `accepting`: kDead when empty.
  State FromStacks(const std::vector<std::vector<int32_t>>& stacks,
                   bool accepting);

 private:
  struct Node {
    int32_t pos;     // element index
    int32_t parent;  // node id, -1: bottom
  };
  struct StateData {
    std::vector<int32_t> stacks;  // node ids, sorted
    bool accepting = false;
    bool marked = false;
    int32_t* row = nullptr;  // in tables_; null: not allocated
  };

  int32_t Intern(int32_t pos, int32_t parent);
  // Adds the stacks reached from (pos, parent) to scratch_.
  void Expand(int32_t pos, int32_t parent);
  State InternState();
  const int32_t* NewRow(State s);
  State Compute(State s, uint8_t byte);
  void Reset();

  std::shared_ptr<const Grammar> g_;
  // Alphabet classes: bytes that every byte set of the grammar contains
  // alike step alike, so a transition computed for one byte fills its
  // whole class in a dense row.
  std::array<uint8_t, 256> class_of_{};
  std::vector<std::vector<uint8_t>> class_bytes_;
  GrammarLimits limits_;
  int32_t marker_pos_ = -1;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> node_ids_;
  std::vector<StateData> states_;
  absl::flat_hash_map<std::vector<int32_t>, State> state_ids_;
  // Dense transition tables (kUnknown until computed) for the first
  // states stepped from; the others use `sparse_`.
  std::deque<std::array<int32_t, 256>> tables_;  // stable addresses
  absl::flat_hash_map<uint64_t, int32_t> sparse_;
  State start_ = kDead;
  bool overflowed_ = false;
  // Scratch of one Compute.
  std::vector<int32_t> scratch_;
  bool scratch_accepting_ = false;
  std::vector<int32_t> key_;  // scratch: a state's lookup key
  std::vector<std::pair<int32_t, int32_t>> work_;
  absl::flat_hash_set<uint64_t> visited_;
};

}  // namespace ckv::grammar
