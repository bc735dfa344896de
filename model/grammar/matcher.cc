#include "model/grammar/matcher.h"

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
  auto g = CompileSpec(spec, limits);
  if (!g.ok()) return g.status();
  auto c = std::make_shared<TokenConstraint>();
  c->spec = spec;
  c->grammar = *std::move(g);
  c->vocab = std::move(vocab);
  c->limits = limits;
  return c;
}

Matcher::Matcher(std::shared_ptr<const TokenConstraint> constraint)
    : c_(std::move(constraint)),
      rec_(c_->grammar, c_->limits),
      state_(rec_.Start()) {
  walk_.resize(c_->vocab->max_depth() + 1);
}

void Matcher::ComputeMask(std::vector<uint64_t>* bits) {
  const TokenIndex& v = *c_->vocab;
  bits->assign((v.vocab_size() + 63) / 64, 0);
  auto set = [bits](int32_t t) { (*bits)[t >> 6] |= uint64_t{1} << (t & 63); };
  bool any = false;
  if (state_ >= 0) {
    walk_[0] = state_;
    const int32_t n = v.num_nodes();
    for (int32_t i = 1; i < n;) {
      const Recognizer::State t =
          rec_.Step(walk_[v.node_depth(i) - 1], v.node_byte(i));
      if (t == Recognizer::kDead) {
        i = v.subtree_end(i);
        continue;
      }
      walk_[v.node_depth(i)] = t;
      for (const int32_t* k = v.tokens_begin(i); k != v.tokens_end(i); ++k) {
        set(*k);
        any = true;
      }
      ++i;
    }
  }
  if (!any || Accepting()) {
    for (int32_t id : v.eog_ids()) set(id);
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
