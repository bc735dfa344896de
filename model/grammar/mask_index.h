// Token masks that do not depend on the deep part of the parse stacks,
// computed once per constraint and shared by all its Matchers (requests).
//
// A recogniser state is a set of stacks; a token's bytes usually touch only
// the top few entries of each. MaskIndex truncates every stack of a state
// below its first entry (under the top) whose continuation must consume a
// byte (at most kMaxKept entries), puts a marker position at the cut, and
// walks the vocabulary trie once from that truncated state in a recogniser
// of its own. A token that stays alive without its walk ever reaching a
// marker is allowed in every state with those truncated stacks (context-
// independent); the walk records the trie nodes where a marker was reached
// (the stack popped into the cut part) and skips their subtrees: those
// tokens are context-dependent and the Matcher rechecks them against its
// real state. States at other nesting depths, or of other requests, share
// the entry when their truncated stacks agree.
//
// Exactness: a token allowed by the truncated walk is allowed by the real
// state (the kept entries behave alike); a token the truncated walk
// rejects without reaching a marker is rejected by the real state (every
// real path that leaves the kept entries passes a marker). So mask =
// entry.bits | (recheck tokens the real state allows) equals the plain walk
// while no state overflows max_stacks; after an overflow of either
// recogniser Lookup returns null and the caller walks plainly.
//
// Bounded repetition (Grammar::RepeatChain): x{0,n} makes a state per
// count, each of which would cost a walk. At a loop head of rep_k (the
// chain's stacks about to start a copy of x, other stacks for what
// follows) the truncated stacks are folded onto the chain's x* rule and
// walked once for all k, counting per token the copies of x it starts
// (one per byte taken from the head state while the continuation's first
// bytes are disjoint from x's); the entry of rep_k is that walk's with the
// tokens that start more than k copies removed. Exact: a path that starts
// c <= k copies is the same path through rep_k; the byte that would start
// copy k + 1 only x could take, so rep_k rejects it. A walk that meets a
// state mixing x's stacks with others (x not prefix-free, an ambiguous
// continuation) stops and the chain is no longer folded.
//
// Bounds: entries hold V/8 bytes each, at most limits.mask_index_bytes in
// all (oldest evicted); folded walks V/8 bytes and 4 per counted token
// each, at most a quarter of that more; the truncated recogniser is rebuilt
// when over its GrammarLimits caches. Thread-safe (one mutex; a walk holds it).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "model/grammar/grammar.h"
#include "model/grammar/recognizer.h"
#include "model/grammar/token_index.h"

namespace ckv::grammar {

class MaskIndex {
 public:
  static constexpr int kMaxKept = 16;  // stack entries kept per stack
  // Entries kept (under the top) whose continuation must consume a byte.
  static constexpr int kSolidKept = 1;

  MaskIndex(std::shared_ptr<const Grammar> grammar,
            std::shared_ptr<const TokenIndex> vocab,
            const GrammarLimits& limits);

  struct Entry {
    std::vector<uint64_t> bits;  // context-independent allowed tokens
    // Trie nodes (preorder ids) whose subtree, own tokens included, the
    // caller checks with its real state; no node lies below another.
    std::vector<int32_t> recheck;
    bool any = false;  // bits has a token
  };
  // The entry of `rec`'s state `s` (not kDead), computing it on a miss;
  // null when the fast path is off (an overflow). Holds the lock.
  std::shared_ptr<const Entry> Lookup(const Recognizer& rec,
                                      Recognizer::State s);

  // Counters (for tests and benchmarks).
  int64_t walks() const { return walks_; }
  int64_t lookups() const { return lookups_; }
  // Entries derived from a folded walk (see above) without a walk.
  int64_t folds() const { return folds_; }

 private:
  // A walk from a chain's x* head state, with per-token counts.
  struct Folded {
    Entry entry;
    std::vector<int32_t> by_count;  // tokens of entry.bits that start
                                    // copies of x, by count ascending
    std::vector<int32_t> from;      // [c]: first by_count index with
                                    // count >= c (c = 0..256)
  };
  // Where a position of rep_k's first alternative goes in x*'s.
  struct FoldPos {
    int32_t chain = -1;
    int32_t k = 0;
    int32_t star_pos = -1;
  };
  static constexpr int kMaxFoldCount = 254;  // longer chains: not folded
  // A continuation starting with at most this many bytes is cut below
  // its tops in a folded head (FoldedEntry).
  static constexpr int kFewBytes = 8;

  void Rebuild();
  void Walk(Recognizer::State p, Entry* e);
  // The trie walk from `p` into `e` (dead subtrees skipped, nodes whose
  // state is marked recorded for recheck); at(depth, state) runs for every
  // other node (false stops the walk: returns false), token(depth, id) for
  // every token allowed there.
  template <typename At, typename Token>
  bool WalkTrie(Recognizer::State p, Entry* e, At at, Token token);
  // The entry of truncated state `q` (its stacks in key_) through a folded
  // walk, or null when q is not a loop head of a foldable chain.
  std::shared_ptr<const Entry> FoldedEntry();
  // The folded walk from head state `p` of `chain`; null when it met a
  // state that cannot be counted.
  std::shared_ptr<const Folded> FoldedWalk(Recognizer::State p, int32_t chain);
  // The truncated `stack` (top first; its entry `chain_at` in x*'s first
  // alternative) is about to start a copy of x: nothing of it consumed.
  bool StartsCopy(const std::vector<int32_t>& stack, size_t chain_at) const;
  // ORs the byte set at position `top` (if it is one) into *bytes.
  void OrTopBytes(int32_t top, std::array<uint64_t, 4>* bytes) const;
  // Some entry of the truncated (and mapped) `stack` is in `chain`'s x*.
  bool InChainKey(const std::vector<int32_t>& stack, int32_t chain) const;
  // Some node of `stack` is in `chain`'s x*.
  bool InChain(int32_t stack, int32_t chain) const;
  enum { kOutside = 0, kInside = 1, kMixed = 2, kHead = 3 };
  // What `t` is to the current folded walk (FoldedWalk).
  int StackClass(Recognizer::State t, int32_t chain);
  void Insert(Recognizer::State q, std::shared_ptr<const Entry> e);
  static int64_t FoldedBytes(const Folded& f);

  std::shared_ptr<const Grammar> g_;  // the grammar plus the marker
  std::shared_ptr<const TokenIndex> vocab_;
  GrammarLimits limits_;
  int32_t marker_ = 0;               // position of the marker
  std::vector<bool> rest_nullable_;  // per position: the rest of its
                                     // alternative can match ""
  size_t max_entries_ = 1;
  std::mutex mu_;
  std::unique_ptr<Recognizer> rec_;
  absl::flat_hash_map<Recognizer::State, std::shared_ptr<const Entry>> entries_;
  std::deque<Recognizer::State> order_;  // insertion order, for eviction
  std::shared_ptr<const Entry> none_;    // of a state without stacks
  bool disabled_ = false;
  std::vector<std::vector<int32_t>> key_;  // scratch: truncated stacks
  std::vector<Recognizer::State> walk_;    // per trie depth
  std::vector<const int32_t*> rows_;
  // Folding (per element position; per chain).
  std::vector<FoldPos> fold_;
  std::vector<int32_t> alt_start_;   // per position: its alternative's start
  std::vector<int32_t> rule_of_;     // per position: its rule (-1: marker)
  std::vector<int32_t> star_chain_;  // chain whose x* holds the position
  std::vector<bool> fold_off_;       // the chain's folded walk gave up
  absl::flat_hash_map<Recognizer::State, std::shared_ptr<const Folded>> folded_;
  std::deque<Recognizer::State> folded_order_;  // oldest first
  int64_t folded_bytes_ = 0;     // FoldedBytes of folded_, at most
                                 // mask_index_bytes / 4 (the newest kept)
  std::vector<int8_t> class_;    // StackClass per state, -1: unknown
  std::vector<int32_t> head_x_;  // the head's stacks in x
  std::vector<uint8_t> count_;   // per trie depth: copies started
  std::vector<std::pair<uint8_t, int32_t>> counted_;  // scratch
  std::vector<int8_t> depth_class_;  // per trie depth: StackClass
  int64_t walks_ = 0, lookups_ = 0, folds_ = 0;
};

}  // namespace ckv::grammar
