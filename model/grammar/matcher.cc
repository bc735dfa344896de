#include "model/grammar/matcher.h"

#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"

namespace ckv::grammar {

absl::StatusOr<std::shared_ptr<const Grammar>> CompileSpec(
    const ConstraintSpec& spec, const GrammarLimits& limits) {
  switch (spec.kind) {
    case ConstraintSpec::kGbnf:
      return CompileGbnf(spec.text, limits);
    case ConstraintSpec::kJsonObject:
      return CompileGbnf(JsonObjectGbnf(), limits);
    case ConstraintSpec::kJsonSchema: {
      auto gbnf = JsonSchemaToGbnf(spec.text, limits);
      if (!gbnf.ok()) return gbnf.status();
      return CompileGbnf(*gbnf, limits);
    }
  }
  return absl::InvalidArgumentError("constraint: unknown kind");
}

absl::StatusOr<std::shared_ptr<const TokenConstraint>> CompileConstraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenIndex> vocab,
    const GrammarLimits& limits) {
  if (vocab->eog_ids().empty()) {
    return absl::InvalidArgumentError(
        "constraint: the model's vocabulary has no end-of-generation token");
  }
  // Recently compiled constraints, so that requests with the same
  // constraint share its grammar and MaskIndex.
  struct Cached {
    ConstraintSpec spec;
    const TokenIndex* vocab;
    GrammarLimits limits;
    std::shared_ptr<const TokenConstraint> constraint;
  };
  static std::mutex mu;
  static std::deque<Cached>* cache = new std::deque<Cached>();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Cached& e : *cache) {
      if (e.vocab == vocab.get() && e.spec.kind == spec.kind &&
          e.spec.text == spec.text && e.limits == limits &&
          e.constraint->vocab == vocab) {
        return e.constraint;
      }
    }
  }
  auto g = CompileSpec(spec, limits);
  if (!g.ok()) return g.status();
  auto c = std::make_shared<TokenConstraint>();
  c->spec = spec;
  c->grammar = *std::move(g);
  c->vocab = std::move(vocab);
  c->limits = limits;
  if (limits.mask_index_bytes > 0) {
    c->masks = std::make_shared<MaskIndex>(c->grammar, c->vocab, limits);
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache->size() >= kConstraintCacheEntries) cache->pop_front();
  cache->push_back({spec, c->vocab.get(), limits, c});
  return c;
}

Matcher::Matcher(std::shared_ptr<const TokenConstraint> constraint)
    : c_(std::move(constraint)),
      rec_(c_->grammar, c_->limits),
      state_(rec_.Start()) {
  walk_.resize(c_->vocab->max_depth() + 1);
  rows_.resize(c_->vocab->max_depth() + 1);
}

bool Matcher::WalkRange(int32_t begin, int32_t end, uint64_t* out) {
  const TokenIndex& v = *c_->vocab;
  const TokenIndex::Node* nodes = v.nodes();
  const int32_t* tokens = v.tokens();
  bool any = false;
  for (int32_t i = begin; i < end;) {
    const TokenIndex::Node& node = nodes[i];
    const int32_t d = node.depth;
    const int32_t* row = rows_[d - 1];
    Recognizer::State t =
        row != nullptr ? row[node.byte] : Recognizer::kUnknown;
    if (t == Recognizer::kUnknown) t = rec_.Step(walk_[d - 1], node.byte);
    if (t == Recognizer::kDead) {
      i = node.end;
      continue;
    }
    walk_[d] = t;
    if (node.end > i + 1) rows_[d] = rec_.Row(t);  // has children
    for (int32_t k = node.token_start; k < nodes[i + 1].token_start; ++k) {
      out[tokens[k] >> 6] |= uint64_t{1} << (tokens[k] & 63);
      any = true;
    }
    ++i;
  }
  return any;
}

bool Matcher::WalkSubtree(int32_t node, uint64_t* out) {
  const TokenIndex& v = *c_->vocab;
  const int32_t d = v.node_depth(node);
  // The bytes leading to `node`: a prefix of its subtree's first token.
  const std::string& bytes = v.bytes(*v.tokens_begin(node));
  Recognizer::State s = state_;
  for (int32_t k = 0; k + 1 < d && s != Recognizer::kDead; ++k) {
    s = rec_.Step(s, static_cast<uint8_t>(bytes[k]));
  }
  if (s == Recognizer::kDead) return false;
  walk_[d - 1] = s;
  rows_[d - 1] = rec_.Row(s);
  return WalkRange(node, v.subtree_end(node), out);
}

void Matcher::ComputeMask(std::vector<uint64_t>* bits) {
  const TokenIndex& v = *c_->vocab;
  bool any = false;
  std::shared_ptr<const MaskIndex::Entry> entry;
  if (state_ >= 0 && c_->masks != nullptr && !rec_.Overflowed()) {
    entry = c_->masks->Lookup(rec_, state_);
  }
  if (entry != nullptr) {
    *bits = entry->bits;
    any = entry->any;
    for (int32_t node : entry->recheck) any |= WalkSubtree(node, bits->data());
  } else {
    bits->assign((v.vocab_size() + 63) / 64, 0);
    if (state_ >= 0) {
      walk_[0] = state_;
      rows_[0] = rec_.Row(state_);
      any = WalkRange(1, v.num_nodes(), bits->data());
    }
  }
  uint64_t* out = bits->data();
  if (!any || Accepting()) {
    for (int32_t id : v.eog_ids()) out[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

const std::vector<uint64_t>& Matcher::Mask() {
  if (current_ >= 0) return slots_[current_];
  if (auto it = cached_.find(state_); it != cached_.end()) {
    current_ = it->second;
    return slots_[current_];
  }
  int slot;
  if (static_cast<int>(slots_.size()) < c_->limits.mask_cache_entries) {
    slot = static_cast<int>(slots_.size());
    slots_.emplace_back();
    slot_owner_.push_back(state_);
  } else {
    slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
    cached_.erase(slot_owner_[slot]);
    slot_owner_[slot] = state_;
  }
  ComputeMask(&slots_[slot]);
  ++masks_computed_;
  cached_[state_] = slot;
  current_ = slot;
  return slots_[slot];
}

bool Matcher::Allowed(int32_t token) {
  if (token < 0 || token >= c_->vocab->vocab_size()) return false;
  const auto& m = Mask();
  return (m[token >> 6] >> (token & 63)) & 1;
}

Recognizer::State Matcher::Walk(Recognizer::State s, absl::string_view bytes) {
  for (unsigned char b : bytes) {
    s = rec_.Step(s, b);
    if (s == Recognizer::kDead) break;
  }
  return s;
}

void Matcher::Advanced() {
  current_ = -1;
  if (rec_.NeedsCompaction()) {
    state_ = rec_.Compact(state_);
    cached_.clear();
    slots_.clear();
    slot_owner_.clear();
    next_slot_ = 0;
  }
}

absl::Status Matcher::Accept(int32_t token) {
  if (!Allowed(token)) {
    return absl::FailedPreconditionError(
        absl::StrCat("constraint: token ", token, " is not allowed here"));
  }
  if (c_->vocab->IsEog(token)) return absl::OkStatus();
  state_ = Walk(state_, c_->vocab->bytes(token));
  Advanced();
  return absl::OkStatus();
}

bool Matcher::AcceptBytes(absl::string_view bytes) {
  if (state_ < 0) return bytes.empty();
  const Recognizer::State s = Walk(state_, bytes);
  if (s == Recognizer::kDead) return false;
  state_ = s;
  Advanced();
  return true;
}

}  // namespace ckv::grammar
