// A grammar bound to a vocabulary (TokenConstraint), and the per-request
// Matcher that gives each decode step's allowed tokens.
//
// Mask(): token t is allowed iff its bytes, fed to the recogniser from the
// current state, never reach a dead state; the end-of-generation tokens
// are allowed iff the text so far is a complete sentence (and are the only
// ones when the grammar can go no further, so generation ends there).
// Cost: the masks of recently seen states are cached per matcher; on a
// miss the constraint's MaskIndex (shared by its matchers) gives the
// context-independent part and only its context-dependent trie subtrees
// are walked from the real state; without it (or after an overflow) one
// trie walk that skips rejected subtrees, with cached byte transitions.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/grammar.h"
#include "model/grammar/mask_index.h"
#include "model/grammar/recognizer.h"
#include "model/grammar/token_index.h"

namespace ckv::grammar {

// What a request asked for (the wire's `constraint`).
struct ConstraintSpec {
  enum Kind { kGbnf, kJsonSchema, kJsonObject };
  Kind kind = kGbnf;
  std::string text;  // GBNF or JSON Schema text; empty for kJsonObject
};

struct TokenConstraint {
  ConstraintSpec spec;
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenIndex> vocab;
  GrammarLimits limits;
  // Shared by the matchers of this constraint; null when
  // limits.mask_index_bytes is 0.
  std::shared_ptr<MaskIndex> masks;
};

// The spec's grammar: GBNF parsed; JSON Schema converted (json_schema.h);
// json_object the grammar of any JSON object. INVALID_ARGUMENT with the
// reason on any error or limit.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileSpec(
    const ConstraintSpec& spec, const GrammarLimits& limits = {});
// CompileSpec bound to `vocab`; INVALID_ARGUMENT also when the vocabulary
// has no end-of-generation token (a constrained output could not end).
// The last kConstraintCacheEntries results are cached (same spec, vocab
// and limits: the same constraint, so requests share its MaskIndex).
inline constexpr size_t kConstraintCacheEntries = 8;
absl::StatusOr<std::shared_ptr<const TokenConstraint>> CompileConstraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenIndex> vocab,
    const GrammarLimits& limits = {});

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const TokenConstraint> constraint);

  // Allowed tokens: bit t of word t / 64. Never empty: with no allowed
  // text token and no accepting state (a dead or overflowed state) it
  // holds the end-of-generation tokens.
  const std::vector<uint64_t>& Mask();
  bool Allowed(int32_t token);
  // Advances by a token's bytes. FAILED_PRECONDITION if the token is not
  // allowed (the state is then unchanged). End-of-generation tokens are
  // accepted when the state accepts and change nothing.
  absl::Status Accept(int32_t token);
  // Advances by raw bytes; false (state unchanged) if rejected.
  bool AcceptBytes(absl::string_view bytes);

  bool Accepting() const { return state_ >= 0 && rec_.Accepting(state_); }
  // Complete and no byte can follow: only end-of-generation is allowed.
  bool Finished() const {
    return state_ < 0 || (rec_.Accepting(state_) && !rec_.CanContinue(state_));
  }
  // The grammar's state space overflowed GrammarLimits::max_stacks.
  bool Overflowed() const { return rec_.Overflowed(); }
  const TokenConstraint& constraint() const { return *c_; }
  // Masks not found in this matcher's cache (computed from the MaskIndex
  // or by a trie walk).
  int64_t masks_computed() const { return masks_computed_; }

 private:
  void ComputeMask(std::vector<uint64_t>* bits);
  // Sets the bits of the allowed tokens of trie nodes [begin, end), one
  // subtree or a run of sibling subtrees at one depth d, from walk_[d - 1]
  // (rows_[d - 1] its row or null); true if any.
  bool WalkRange(int32_t begin, int32_t end, uint64_t* out);
  // The same for the subtree of trie node `node`, from state_.
  bool WalkSubtree(int32_t node, uint64_t* out);
  Recognizer::State Walk(Recognizer::State s, absl::string_view bytes);
  void Advanced();

  std::shared_ptr<const TokenConstraint> c_;
  Recognizer rec_;
  Recognizer::State state_;
  std::vector<Recognizer::State> walk_;  // state per trie depth
  std::vector<const int32_t*> rows_;     // its transition row
  // Mask cache: state -> slot.
  absl::flat_hash_map<Recognizer::State, int> cached_;
  std::vector<std::vector<uint64_t>> slots_;
  std::vector<Recognizer::State> slot_owner_;
  int next_slot_ = 0;
  int current_ = -1;  // slot of state_'s mask, -1: not computed
  int64_t masks_computed_ = 0;
};

}  // namespace ckv::grammar
