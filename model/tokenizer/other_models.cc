#include "model/tokenizer/other_models.h"

#include <algorithm>
#include <cfloat>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

// Returns the status of `expr` from the enclosing function unless it is OK.
#define CKV_RETURN_IF_BAD(expr)               \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)

namespace ckv::tokenizer_internal {
namespace {

constexpr absl::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581

absl::Status CorruptCharsmap(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.ggml.precompiled_charsmap: ", what));
}

// SentencePiece's precompiled normalization map: a XOR-compressed compact
// double array over input bytes whose leaves index NUL-terminated
// replacement strings.
class Charsmap {
 public:
  absl::Status Init(const std::vector<uint8_t>& blob) {
    if (blob.empty()) return absl::OkStatus();
    if (blob.size() < 4) return CorruptCharsmap("shorter than its header");
    const uint64_t xcda_bytes = ReadU32(blob.data());
    if (xcda_bytes + 4 >= blob.size()) {
      return CorruptCharsmap("array size exceeds the blob");
    }
    nodes_.resize(xcda_bytes / 4);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      nodes_[i] = ReadU32(blob.data() + 4 + 4 * i);
    }
    replacements_.assign(blob.begin() + 4 + xcda_bytes, blob.end());
    return absl::OkStatus();
  }

  // Longest prefix of `s` with a replacement: *len bytes consumed (0: none)
  // and the replacement text.
  absl::Status Match(absl::string_view s, size_t* len,
                     absl::string_view* replacement) const {
    *len = 0;
    if (nodes_.empty()) return absl::OkStatus();
    uint32_t node = 0;
    size_t value = 0;
    CKV_RETURN_IF_BAD(Base(0, &node));
    for (size_t i = 0; i < s.size(); ++i) {
      const uint8_t c = static_cast<uint8_t>(s[i]);
      if (c == 0) break;
      node ^= c;
      uint32_t packed = 0;
      CKV_RETURN_IF_BAD(Node(node, &packed));
      if ((packed & ((1u << 31) | 0xFFu)) != c) break;
      const bool leaf = (packed >> 8) & 1;
      uint32_t base = 0;
      CKV_RETURN_IF_BAD(Base(node, &base));
      node ^= base;
      if (leaf) {
        uint32_t v = 0;
        CKV_RETURN_IF_BAD(Node(node, &v));
        *len = i + 1;
        value = v & ((1u << 31) - 1);
      }
    }
    if (*len == 0) return absl::OkStatus();
    if (value >= replacements_.size()) {
      return CorruptCharsmap("replacement index out of range");
    }
    const auto* start = reinterpret_cast<const char*>(replacements_.data());
    const size_t end =
        absl::string_view(start + value, replacements_.size() - value)
            .find('\0');
    if (end == absl::string_view::npos) {
      return CorruptCharsmap("unterminated replacement");
    }
    *replacement = absl::string_view(start + value, end);
    return absl::OkStatus();
  }

 private:
  static uint32_t ReadU32(const uint8_t* p) {
    return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
           uint32_t{p[3]} << 24;
  }
  absl::Status Node(size_t index, uint32_t* out) const {
    if (index >= nodes_.size()) return CorruptCharsmap("node out of range");
    *out = nodes_[index];
    return absl::OkStatus();
  }
  absl::Status Base(size_t index, uint32_t* out) const {
    uint32_t packed = 0;
    CKV_RETURN_IF_BAD(Node(index, &packed));
    *out = (packed >> 10) << ((packed & (1u << 9)) >> 6);
    return absl::OkStatus();
  }

  std::vector<uint32_t> nodes_;
  std::vector<uint8_t> replacements_;
};

class Unigram : public OtherModel {
 public:
  // Token classes are read here, once: attributes llama.cpp assigns later
  // (e.g. "unused" by name) do not make a token matchable, as in llama.cpp.
  Unigram(const Vocab* vocab, const UnigramOptions& options)
      : vocab_(vocab), options_(options), matchable_(vocab->size(), false) {
    float min_score = FLT_MAX;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      const uint32_t a = vocab->attr[id];
      if (a & kAttrNormal) min_score = std::min(min_score, vocab->score[id]);
      if (a & (kAttrNormal | kAttrUserDefined | kAttrUnused)) {
        matchable_[id] = true;
        max_len_ = std::max(max_len_, vocab->text[id].size());
      }
      if (a & kAttrUserDefined) {
        user_defined_.insert(id);
        max_user_len_ = std::max(max_user_len_, vocab->text[id].size());
      }
    }
    unknown_score_ = static_cast<double>(min_score) - 10.0;
  }

  absl::Status Init(const std::vector<uint8_t>& charsmap) {
    return charsmap_.Init(charsmap);
  }

  absl::Status Encode(absl::string_view text,
                      std::vector<int32_t>* out) const override {
    std::string normalized;
    CKV_RETURN_IF_BAD(Normalize(text, &normalized));
    if (normalized.empty()) return absl::OkStatus();
    Segment(normalized, out);
    return absl::OkStatus();
  }

 private:
  struct Best {
    int32_t token;
    size_t start;
    double score;
  };

  // Token id of `s` if it is a normal, user-defined or unused token.
  int32_t Matchable(absl::string_view s) const {
    const int32_t id = vocab_->Find(s);
    return id >= 0 && matchable_[id] ? id : -1;
  }

  void Segment(absl::string_view s, std::vector<int32_t>* out) const {
    const size_t n = s.size();
    std::vector<Best> best(n + 1, Best{options_.unk_id, 0, -DBL_MAX});
    best[0] = Best{options_.unk_id, 0, 0.0};
    for (size_t pos = 0; pos < n;) {
      const size_t char_len = std::min<size_t>(
          Utf8LenFromLead(static_cast<uint8_t>(s[pos])), n - pos);
      bool whole_char = false;
      const double base = best[pos].score;
      const size_t max_end = std::min(n, pos + max_len_);
      for (size_t end = pos + 1; end <= max_end; ++end) {
        const int32_t id = Matchable(s.substr(pos, end - pos));
        if (id < 0) continue;
        if (end - pos == char_len) whole_char = true;
        const double score =
            base + (user_defined_.contains(id)
                        ? 0.0
                        : static_cast<double>(vocab_->score[id]));
        if (score > best[end].score) best[end] = Best{id, pos, score};
      }
      if (!whole_char) {
        const double score = base + unknown_score_;
        Best& b = best[pos + char_len];
        if (score > b.score) b = Best{options_.unk_id, pos, score};
      }
      pos += char_len;
    }
    const size_t first = out->size();
    bool prev_unknown = false;
    for (size_t at = n;;) {
      const Best& b = best[at];
      const bool unknown = b.token == options_.unk_id;
      if (!(prev_unknown && unknown) && b.token >= 0) out->push_back(b.token);
      if (b.start == 0) break;
      prev_unknown = unknown;
      at = b.start;
    }
    std::reverse(out->begin() + first, out->end());
  }

  // One normalization step at the start of `s`: the user-defined token or
  // charsmap replacement or character it begins with.
  absl::Status NormalizePrefix(absl::string_view s, absl::string_view* repl,
                               size_t* consumed) const {
    for (size_t len = std::min(s.size(), max_user_len_); len > 0; --len) {
      const int32_t id = vocab_->Find(s.substr(0, len));
      if (id >= 0 && user_defined_.contains(id)) {
        *repl = s.substr(0, len);
        *consumed = len;
        return absl::OkStatus();
      }
    }
    size_t len = 0;
    CKV_RETURN_IF_BAD(charsmap_.Match(s, &len, repl));
    if (len > 0) {
      *consumed = len;
      return absl::OkStatus();
    }
    const int char_len = DecodeUtf8Char(s, nullptr);
    if (char_len > 0) {
      *repl = s.substr(0, static_cast<size_t>(char_len));
      *consumed = static_cast<size_t>(char_len);
    } else {
      *repl = kReplacementChar;
      *consumed = 1;
    }
    return absl::OkStatus();
  }

  absl::Status Normalize(absl::string_view in, std::string* out) const {
    const bool merge_spaces = options_.remove_extra_whitespaces;
    bool space_prepended = false;
    bool in_word = false;
    out->reserve(in.size() * 3);
    for (size_t pos = 0; pos < in.size();) {
      absl::string_view repl;
      size_t consumed = 0;
      CKV_RETURN_IF_BAD(NormalizePrefix(in.substr(pos), &repl, &consumed));
      for (char c : repl) {
        if (c != ' ') {
          if (!in_word) {
            in_word = true;
            if ((options_.add_space_prefix && !space_prepended) ||
                merge_spaces) {
              out->append(kEscapedSpace.data(), kEscapedSpace.size());
              space_prepended = true;
            }
          }
          out->push_back(c);
        } else {
          in_word = false;
          if (!merge_spaces) {
            out->append(kEscapedSpace.data(), kEscapedSpace.size());
          }
        }
      }
      pos += consumed;
    }
    return absl::OkStatus();
  }

  const Vocab* vocab_;
  UnigramOptions options_;
  Charsmap charsmap_;
  std::vector<bool> matchable_;
  absl::flat_hash_set<int32_t> user_defined_;
  size_t max_len_ = 0;
  size_t max_user_len_ = 0;
  double unknown_score_ = 0.0;
};

class Rwkv : public OtherModel {
 public:
  explicit Rwkv(const Vocab* vocab) {
    for (int32_t id = 0; id < vocab->size(); ++id) {
      std::string bytes = UnescapeRwkvToken(vocab->text[id]);
      max_len_ = std::max(max_len_, bytes.size());
      ids_[std::move(bytes)] = id;  // a later duplicate wins, as in a trie
    }
  }

  absl::Status Encode(absl::string_view text,
                      std::vector<int32_t>* out) const override {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t len = std::min(max_len_, text.size() - pos);
      for (; len > 0; --len) {
        auto it = ids_.find(text.substr(pos, len));
        if (it != ids_.end()) {
          out->push_back(it->second);
          break;
        }
      }
      pos += len > 0 ? len : 1;
    }
    return absl::OkStatus();
  }

 private:
  absl::flat_hash_map<std::string, int32_t> ids_;
  size_t max_len_ = 0;
};

}  // namespace

std::string UnescapeRwkvToken(absl::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  bool escaping = false;
  int hex_remaining = 0;
  uint8_t hex_acc = 0;
  for (char c : escaped) {
    if (hex_remaining > 0) {
      const uint8_t digit = static_cast<uint8_t>(
          c >= 'a' ? c - 'a' + 10 : c - '0');  // unchecked, as llama.cpp
      hex_acc = static_cast<uint8_t>((hex_acc << 4) + digit);
      if (--hex_remaining == 0) {
        out.push_back(static_cast<char>(hex_acc));
        hex_acc = 0;
      }
      continue;
    }
    if (escaping) {
      escaping = false;
      switch (c) {
        case 't':
          out.push_back('\t');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'x':
          hex_remaining = 2;
          break;
        default:
          out.push_back(c);
      }
      continue;
    }
    if (c == '\\') {
      escaping = true;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<OtherModel>> MakeUnigram(
    const Vocab* vocab, const UnigramOptions& options,
    const std::vector<uint8_t>& charsmap) {
  auto model = std::make_unique<Unigram>(vocab, options);
  CKV_RETURN_IF_BAD(model->Init(charsmap));
  return std::unique_ptr<OtherModel>(std::move(model));
}

std::unique_ptr<OtherModel> MakeRwkv(const Vocab* vocab) {
  return std::make_unique<Rwkv>(vocab);
}

}  // namespace ckv::tokenizer_internal

#undef CKV_RETURN_IF_BAD
