#include "model/grammar/mask_index.h"

#include <algorithm>
#include <utility>

namespace ckv::grammar {
namespace {

// The grammar plus one alternative [empty byte set, kEnd] whose first
// position is the marker: a stack with the marker on top matches nothing.
std::shared_ptr<const Grammar> WithMarker(const Grammar& g, int32_t* marker) {
  auto m = std::make_shared<Grammar>(g);
  m->byte_sets.push_back({0, 0, 0, 0});
  *marker = static_cast<int32_t>(m->elements.size());
  m->elements.push_back(-2 - static_cast<int32_t>(m->byte_sets.size() - 1));
  m->elements.push_back(kEnd);
  return m;
}

}  // namespace

MaskIndex::MaskIndex(std::shared_ptr<const Grammar> grammar,
                     std::shared_ptr<const TokenIndex> vocab,
                     const GrammarLimits& limits)
    : vocab_(std::move(vocab)), limits_(limits) {
  g_ = WithMarker(*grammar, &marker_);
  // Nullable rules by fixpoint (a bounded number of passes: a rule left
  // non-nullable only makes truncation shallower, never a mask wrong).
  const auto& el = g_->elements;
  std::vector<bool> rule_nullable(g_->rule_alternatives.size(), false);
  for (int pass = 0, changed = 1; changed && pass < 64; ++pass) {
    changed = 0;
    for (size_t r = 0; r < rule_nullable.size(); ++r) {
      if (rule_nullable[r]) continue;
      for (int32_t alt : g_->rule_alternatives[r]) {
        int32_t q = alt;
        while (Grammar::IsRef(el[q]) && rule_nullable[el[q]]) ++q;
        if (el[q] == kEnd) {
          rule_nullable[r] = true;
          changed = 1;
          break;
        }
      }
    }
  }
  rest_nullable_.assign(el.size(), false);
  for (size_t q = el.size(); q-- > 0;) {
    const int32_t e = el[q];
    rest_nullable_[q] = e == kEnd || (Grammar::IsRef(e) && rule_nullable[e] &&
                                      rest_nullable_[q + 1]);
  }
  alt_start_.assign(el.size(), 0);
  rule_of_.assign(el.size(), -1);
  for (size_t r = 0; r < g_->rule_alternatives.size(); ++r) {
    for (int32_t alt : g_->rule_alternatives[r]) {
      for (int32_t q = alt;; ++q) {
        alt_start_[q] = alt;
        rule_of_[q] = static_cast<int32_t>(r);
        if (el[q] == kEnd) break;
      }
    }
  }
  // Folding tables: rep_k's positions (x and the return into the tail
  // reference) and their places in x*'s first alternative.
  fold_.assign(el.size(), FoldPos{});
  star_chain_.assign(el.size(), -1);
  const auto& chains = g_->repeat_chains;
  fold_off_.assign(chains.size(), false);
  for (size_t c = 0; c < chains.size(); ++c) {
    const RepeatChain& ch = chains[c];
    if (!limits_.fold_repeats || ch.star < 0 ||
        ch.rules.size() > kMaxFoldCount) {
      continue;
    }
    const int32_t star_alt = g_->rule_alternatives[ch.star][0];
    for (int32_t off = 0; off <= ch.body_size; ++off) {
      star_chain_[star_alt + off] = static_cast<int32_t>(c);
    }
    for (size_t k = 1; k <= ch.rules.size(); ++k) {
      const int32_t alt = g_->rule_alternatives[ch.rules[k - 1]][0];
      for (int32_t off = 0; off <= ch.body_size; ++off) {
        fold_[alt + off] = {static_cast<int32_t>(c), static_cast<int32_t>(k),
                            star_alt + off};
      }
    }
  }
  const size_t words = (vocab_->vocab_size() + 63) / 64;
  max_entries_ = std::max<size_t>(
      4, static_cast<size_t>(limits_.mask_index_bytes) / (words * 8 + 64));
  walk_.resize(vocab_->max_depth() + 1);
  rows_.resize(vocab_->max_depth() + 1);
  count_.resize(vocab_->max_depth() + 1);
  depth_class_.resize(vocab_->max_depth() + 1);
  Rebuild();
}

void MaskIndex::Rebuild() {
  rec_ = std::make_unique<Recognizer>(g_, limits_, marker_);
  entries_.clear();
  order_.clear();
  folded_.clear();
  folded_order_.clear();
  folded_bytes_ = 0;
}

int64_t MaskIndex::FoldedBytes(const Folded& f) {
  return static_cast<int64_t>(f.entry.bits.size() * 8 +
                              f.entry.recheck.size() * 4 +
                              f.by_count.size() * 4 + f.from.size() * 4);
}

void MaskIndex::Insert(Recognizer::State q, std::shared_ptr<const Entry> e) {
  if (entries_.size() >= max_entries_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  entries_.emplace(q, std::move(e));
  order_.push_back(q);
}

std::shared_ptr<const MaskIndex::Entry> MaskIndex::Lookup(const Recognizer& rec,
                                                          Recognizer::State s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (disabled_) return nullptr;
  ++lookups_;
  if (rec.Stacks(s).empty()) {  // accepting, no byte can follow
    if (none_ == nullptr) {
      auto e = std::make_shared<Entry>();
      e->bits.assign((vocab_->vocab_size() + 63) / 64, 0);
      none_ = std::move(e);
    }
    return none_;
  }
  if (rec_->NeedsCompaction()) Rebuild();
  // The truncated stacks: keep the top, then entries down to and including
  // the first whose rest cannot match "", then the marker (none when the
  // whole stack was kept).
  key_.resize(rec.Stacks(s).size());
  size_t k = 0;
  for (int32_t id : rec.Stacks(s)) {
    auto& kept = key_[k++];
    kept.clear();
    kept.push_back(rec.NodePos(id));
    int32_t n = rec.NodeParent(id);
    int solid = 0;  // kept entries whose rest cannot match ""
    while (n >= 0) {
      if (static_cast<int>(kept.size()) == kMaxKept) {
        kept.push_back(marker_);
        break;
      }
      const int32_t pos = rec.NodePos(n);
      kept.push_back(pos);
      n = rec.NodeParent(n);
      if (!rest_nullable_[pos] && ++solid == kSolidKept && n >= 0) {
        kept.push_back(marker_);
        break;
      }
    }
  }
  const Recognizer::State p = rec_->FromStacks(key_, false);
  if (p == Recognizer::kDead || rec_->Overflowed()) {
    disabled_ = true;
    return nullptr;
  }
  if (auto it = entries_.find(p); it != entries_.end()) return it->second;
  std::shared_ptr<const Entry> e = FoldedEntry();
  if (e != nullptr) {
    ++folds_;
  } else if (!rec_->Overflowed()) {
    auto walked = std::make_shared<Entry>();
    Walk(p, walked.get());
    ++walks_;
    e = std::move(walked);
  }
  if (rec_->Overflowed()) {
    disabled_ = true;  // the grammar is too ambiguous for truncated walks
    Rebuild();
    return nullptr;
  }
  Insert(p, e);
  return e;
}

std::shared_ptr<const MaskIndex::Entry> MaskIndex::FoldedEntry() {
  // The loop's chain: one whose positions appear once in some stacks (all
  // with one k: the stacks about to start a copy of x) and not at all in
  // the others (what follows the repetition, which may hold positions of
  // other chains: outer repetitions, left as they are). Candidates: the
  // chain of each stack's topmost chain position.
  std::vector<std::vector<int32_t>> canon;
  int32_t chain = -1, k = 0, tried = -1;
  for (const auto& top_stack : key_) {
    int32_t c = -1;
    for (int32_t pos : top_stack) {
      if (pos != marker_ && fold_[pos].chain >= 0) {
        c = fold_[pos].chain;
        break;
      }
    }
    if (c < 0 || fold_off_[c] || c == tried) continue;
    tried = c;
    canon = key_;
    k = -1;
    bool ok = true;
    for (auto& stack : canon) {
      int in = 0;
      for (size_t i = 0; i < stack.size() && ok; ++i) {
        int32_t& pos = stack[i];
        if (pos == marker_ || fold_[pos].chain != c) continue;
        const FoldPos& f = fold_[pos];
        if (++in > 1 || (k >= 0 && f.k != k)) ok = false;
        k = f.k;
        pos = f.star_pos;
        ok = ok && StartsCopy(stack, i);
      }
    }
    if (ok) {
      chain = c;
      break;
    }
  }
  if (chain < 0) return nullptr;
  // What follows the repetition, when it starts with a few bytes only
  // (a closing quote): its stacks cut right below their tops, so that the
  // head is the same in every context of the repetition (one walk for
  // all of them; the tokens that leave x are rechecked, as below any cut).
  std::array<uint64_t, 4> rest_first{};
  for (const auto& stack : canon) {
    if (!InChainKey(stack, chain)) OrTopBytes(stack[0], &rest_first);
  }
  int rest_bytes = 0;
  for (uint64_t w : rest_first) rest_bytes += __builtin_popcountll(w);
  if (rest_bytes <= kFewBytes) {
    for (auto& stack : canon) {
      if (stack.size() > 2 && !InChainKey(stack, chain)) {
        stack.resize(1);
        stack.push_back(marker_);
      }
    }
  }
  const Recognizer::State head = rec_->FromStacks(canon, false);
  if (head == Recognizer::kDead || rec_->Overflowed()) return nullptr;
  std::shared_ptr<const Folded> f;
  if (auto it = folded_.find(head); it != folded_.end()) {
    f = it->second;
  } else {
    f = FoldedWalk(head, chain);
    ++walks_;
    if (f == nullptr) {
      fold_off_[chain] = true;
      return nullptr;
    }
    // At most a quarter of mask_index_bytes (at least the newest walk).
    const int64_t budget = limits_.mask_index_bytes / 4;
    folded_bytes_ += FoldedBytes(*f);
    while (!folded_order_.empty() && folded_bytes_ > budget) {
      auto old = folded_.find(folded_order_.front());
      folded_bytes_ -= FoldedBytes(*old->second);
      folded_.erase(old);
      folded_order_.pop_front();
    }
    folded_.emplace(head, f);
    folded_order_.push_back(head);
  }
  // rep_k: the tokens that start at most k copies of x.
  auto e = std::make_shared<Entry>(f->entry);
  for (size_t i = f->from[k + 1]; i < f->by_count.size(); ++i) {
    const int32_t t = f->by_count[i];
    e->bits[t >> 6] &= ~(uint64_t{1} << (t & 63));
  }
  e->any = std::any_of(e->bits.begin(), e->bits.end(),
                       [](uint64_t w) { return w != 0; });
  return e;
}

bool MaskIndex::StartsCopy(const std::vector<int32_t>& stack,
                           size_t chain_at) const {
  const auto& el = g_->elements;
  const int32_t top = stack[0];
  if (alt_start_[top] != top || !Grammar::IsBytes(el[top])) return false;
  // Below the top, each entry returns right after the leading reference
  // of its alternative, to a rule whose left corner (through alternatives
  // that are one reference) holds the entry above.
  for (size_t i = chain_at; i >= 1; --i) {
    const int32_t pos = stack[i];
    const int32_t first = alt_start_[pos];
    if (pos != first + 1 || !Grammar::IsRef(el[first])) return false;
    const int32_t want = rule_of_[stack[i - 1]];
    // Rules reached from el[first] through one-reference alternatives
    // (a breadth-first search over at most 64 rules).
    int32_t reach[64];
    int n = 0;
    reach[n++] = el[first];
    bool found = false;
    for (int j = 0; j < n && !found; ++j) {
      found = reach[j] == want;
      for (int32_t alt : g_->rule_alternatives[reach[j]]) {
        if (!Grammar::IsRef(el[alt]) || el[alt + 1] != kEnd || n == 64) {
          continue;
        }
        if (std::find(reach, reach + n, el[alt]) == reach + n) {
          reach[n++] = el[alt];
        }
      }
    }
    if (!found) return false;
  }
  return true;
}

void MaskIndex::OrTopBytes(int32_t top, std::array<uint64_t, 4>* bytes) const {
  const int32_t e = g_->elements[top];
  if (!Grammar::IsBytes(e)) return;
  for (int w = 0; w < 4; ++w)
    bytes->at(w) |= g_->byte_sets[Grammar::SetOf(e)][w];
}

bool MaskIndex::InChainKey(const std::vector<int32_t>& stack,
                           int32_t chain) const {
  for (int32_t pos : stack) {
    if (pos != marker_ && star_chain_[pos] == chain) return true;
  }
  return false;
}

bool MaskIndex::InChain(int32_t stack, int32_t chain) const {
  for (int32_t n = stack; n >= 0; n = rec_->NodeParent(n)) {
    if (star_chain_[rec_->NodePos(n)] == chain) return true;
  }
  return false;
}

int MaskIndex::StackClass(Recognizer::State t, int32_t chain) {
  if (static_cast<size_t>(t) >= class_.size()) {
    class_.resize(rec_->num_states(), -1);
  }
  if (class_[t] >= 0) return class_[t];
  std::vector<int32_t> in;  // t's stacks in x (sorted, as Stacks are)
  bool other = false;
  std::array<uint64_t, 4> x_first{}, rest_first{};
  for (int32_t id : rec_->Stacks(t)) {
    const bool x = InChain(id, chain);
    if (x) {
      in.push_back(id);
    } else {
      other = true;
    }
    OrTopBytes(rec_->NodePos(id), x ? &x_first : &rest_first);
  }
  int cls;
  if (in.empty()) {
    cls = kOutside;
  } else if (in == head_x_) {
    // A loop head: x's first bytes must be x's alone.
    cls = kHead;
    for (int w = 0; w < 4; ++w) {
      if (x_first[w] & rest_first[w]) cls = kMixed;
    }
  } else {
    cls = other ? kMixed : kInside;
  }
  class_[t] = static_cast<int8_t>(cls);
  return cls;
}

std::shared_ptr<const MaskIndex::Folded> MaskIndex::FoldedWalk(
    Recognizer::State head, int32_t chain) {
  // Every state of the walk is classified against the head's stacks in x
  // (StackClass): about to start a copy (a head; the stacks for what
  // follows may be truncated at other depths than the head's), inside a
  // copy, outside x, or mixed (not countable).
  class_.clear();
  head_x_.clear();
  for (int32_t id : rec_->Stacks(head)) {
    if (InChain(id, chain)) head_x_.push_back(id);
  }
  if (StackClass(head, chain) != kHead) return nullptr;
  const TokenIndex& v = *vocab_;
  auto f = std::make_shared<Folded>();
  Entry* e = &f->entry;
  counted_.clear();  // (count, token) of the tokens that start copies
  counted_.reserve(v.vocab_size());
  count_[0] = 0;
  depth_class_[0] = kHead;
  // Counting: from a head, a byte into x (inside a copy, or straight to a
  // head: a one-byte x) starts a copy; outside x nothing changes; a state
  // mixing x's stacks with others cannot be counted (the walk stops).
  const bool whole = WalkTrie(
      head, e,
      [&](int32_t d, Recognizer::State t) {
        const int parent = depth_class_[d - 1];
        int cls = kOutside;
        if (parent != kOutside) {
          cls = StackClass(t, chain);
          if (cls == kMixed) return false;
        }
        const int started = parent == kHead && cls != kOutside;
        count_[d] =
            static_cast<uint8_t>(std::min<int>(255, count_[d - 1] + started));
        depth_class_[d] = static_cast<int8_t>(cls);
        return true;
      },
      [&](int32_t d, int32_t token) {
        if (count_[d] > 0) counted_.emplace_back(count_[d], token);
      });
  if (!whole) return nullptr;
  // Tokens by count (a counting sort over 1..255): from[c] is the first
  // index with count >= c.
  std::array<int32_t, 257> per{};
  for (const auto& [c, t] : counted_) ++per[c];
  f->from.assign(257, 0);
  for (int c = 2; c <= 256; ++c) f->from[c] = f->from[c - 1] + per[c - 1];
  f->by_count.resize(counted_.size());
  std::array<int32_t, 257> at;
  std::copy(f->from.begin(), f->from.end(), at.begin());
  for (const auto& [c, t] : counted_) f->by_count[at[c]++] = t;
  return f;
}

template <typename At, typename Token>
bool MaskIndex::WalkTrie(Recognizer::State p, Entry* e, At at, Token token) {
  const TokenIndex& v = *vocab_;
  e->bits.assign((v.vocab_size() + 63) / 64, 0);
  uint64_t* out = e->bits.data();
  walk_[0] = p;
  rows_[0] = rec_->Row(p);
  const TokenIndex::Node* nodes = v.nodes();
  const int32_t* tokens = v.tokens();
  const int32_t n = v.num_nodes();
  for (int32_t i = 1; i < n;) {
    const TokenIndex::Node& node = nodes[i];
    const int32_t d = node.depth;
    const int32_t* row = rows_[d - 1];
    Recognizer::State t =
        row != nullptr ? row[node.byte] : Recognizer::kUnknown;
    if (t == Recognizer::kUnknown) t = rec_->Step(walk_[d - 1], node.byte);
    if (t == Recognizer::kDead) {
      i = node.end;
      continue;
    }
    if (rec_->Marked(t)) {  // a stack popped into the cut: context-dependent
      e->recheck.push_back(i);
      i = node.end;
      continue;
    }
    if (!at(d, t)) return false;
    walk_[d] = t;
    if (node.end > i + 1) rows_[d] = rec_->Row(t);
    for (int32_t k = node.token_start; k < nodes[i + 1].token_start; ++k) {
      out[tokens[k] >> 6] |= uint64_t{1} << (tokens[k] & 63);
      token(d, tokens[k]);
      e->any = true;
    }
    ++i;
  }
  return true;
}

void MaskIndex::Walk(Recognizer::State p, Entry* e) {
  WalkTrie(
      p, e, [](int32_t, Recognizer::State) { return true; },
      [](int32_t, int32_t) {});
}

}  // namespace ckv::grammar
