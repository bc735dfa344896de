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
// Bounds: entries hold V/8 bytes each, at most limits.mask_index_bytes in
// all (oldest evicted); the truncated recogniser is rebuilt when over its
// GrammarLimits caches. Thread-safe (one mutex; a walk holds it).
#pragma once

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

 private:
  void Rebuild();
  void Walk(Recognizer::State p, Entry* e);

  std::shared_ptr<const Grammar> g_;  // the grammar plus the marker
  std::shared_ptr<const TokenIndex> vocab_;
  GrammarLimits limits_;
  int32_t marker_ = 0;                // position of the marker
  std::vector<bool> rest_nullable_;   // per position: the rest of its
                                      // alternative can match ""
  size_t max_entries_ = 1;
  std::mutex mu_;
  std::unique_ptr<Recognizer> rec_;
  absl::flat_hash_map<Recognizer::State, std::shared_ptr<const Entry>>
      entries_;
  std::deque<Recognizer::State> order_;  // insertion order, for eviction
  std::shared_ptr<const Entry> none_;  // of a state without stacks
  bool disabled_ = false;
  std::vector<std::vector<int32_t>> key_;  // scratch: truncated stacks
  std::vector<Recognizer::State> walk_;    // per trie depth
  std::vector<const int32_t*> rows_;
  int64_t walks_ = 0, lookups_ = 0;
};

}  // namespace ckv::grammar
