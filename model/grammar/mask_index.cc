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
  const size_t words = (vocab_->vocab_size() + 63) / 64;
  max_entries_ = std::max<size_t>(
      4, static_cast<size_t>(limits_.mask_index_bytes) / (words * 8 + 64));
  walk_.resize(vocab_->max_depth() + 1);
  rows_.resize(vocab_->max_depth() + 1);
  Rebuild();
}

void MaskIndex::Rebuild() {
  rec_ = std::make_unique<Recognizer>(g_, limits_, marker_);
  entries_.clear();
  order_.clear();
}

std::shared_ptr<const MaskIndex::Entry> MaskIndex::Lookup(
    const Recognizer& rec, Recognizer::State s) {
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
  auto e = std::make_shared<Entry>();
  Walk(p, e.get());
  ++walks_;
  if (rec_->Overflowed()) {
    disabled_ = true;  // the grammar is too ambiguous for truncated walks
    Rebuild();
    return nullptr;
  }
  if (entries_.size() >= max_entries_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  entries_.emplace(p, e);
  order_.push_back(p);
  return e;
}

void MaskIndex::Walk(Recognizer::State p, Entry* e) {
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
    walk_[d] = t;
    if (node.end > i + 1) rows_[d] = rec_->Row(t);
    for (int32_t k = node.token_start; k < nodes[i + 1].token_start; ++k) {
      out[tokens[k] >> 6] |= uint64_t{1} << (tokens[k] & 63);
      e->any = true;
    }
    ++i;
  }
}

}  // namespace ckv::grammar
