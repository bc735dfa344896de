#include "model/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace ckv::tokenizer_internal {
namespace {

// Unicode White_Space, the set llama.cpp's tables use for `\s` (PCRE2's UCP
// `\s` lacks U+0085).
constexpr char kWhiteSpaceItems[] =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029})"
    R"(\x{202F}\x{205F}\x{3000})";

// The (?!\S) lookahead and the \s+ fallback need a JIT stack larger than
// PCRE2's 32 KiB default only for pathological inputs; 1 MiB is ample.
constexpr size_t kJitStackMax = 1 << 20;

}  // namespace

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
};

std::string AdaptPattern(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        absl::StrAppend(&out, in_class ? "" : "[", kWhiteSpaceItems,
                        in_class ? "" : "]");
      } else if (e == 'S' && !in_class) {
        absl::StrAppend(&out, "[^", kWhiteSpaceItems, "]");
      } else if (e == 'd') {
        absl::StrAppend(&out, in_class ? "0-9" : "[0-9]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' first in a class (after an optional '^') is literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^')
        out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']')
        out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Pretokenizer>> Pretokenizer::Create(
    const std::vector<std::string>& patterns) {
  std::unique_ptr<Pretokenizer> pt(new Pretokenizer());
  for (const std::string& pattern : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string adapted = AdaptPattern(pattern);
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(adapted.data()), adapted.size(),
        PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return absl::InvalidArgumentError(
          absl::StrCat("pre-tokenizer regex '", pattern, "' at offset ",
                       err_off, ": ", reinterpret_cast<const char*>(msg)));
    }
    auto* c = new Compiled{code, false};
    c->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    pt->regexes_.push_back(c);
  }
  return pt;
}

Pretokenizer::~Pretokenizer() {
  for (Compiled* c : regexes_) {
    pcre2_code_free(c->code);
    delete c;
  }
}

namespace {

// Per-call PCRE2 state (match data, JIT stack), freed on scope exit.
class MatchScratch {
 public:
  MatchScratch() {
    ctx_ = pcre2_match_context_create(nullptr);
    jit_stack_ = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);
    if (ctx_ && jit_stack_) pcre2_jit_stack_assign(ctx_, nullptr, jit_stack_);
    data_ = pcre2_match_data_create(4, nullptr);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data_);
    pcre2_jit_stack_free(jit_stack_);
    pcre2_match_context_free(ctx_);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  bool ok() const { return ctx_ && jit_stack_ && data_; }
  pcre2_match_context* ctx() { return ctx_; }
  pcre2_match_data* data() { return data_; }

 private:
  pcre2_match_context* ctx_ = nullptr;
  pcre2_jit_stack* jit_stack_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// Splits one piece with one regex into matches and gaps, appending to *out.
absl::Status SplitPiece(pcre2_code* code, absl::string_view piece,
                        MatchScratch* scratch,
                        std::vector<absl::string_view>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t start = 0;    // where the next search starts
  size_t emitted = 0;  // end of what has been appended so far
  while (start < piece.size()) {
    const int rc =
        pcre2_match(code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK,
                    scratch->data(), scratch->ctx());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return absl::ResourceExhaustedError(absl::StrCat(
          "pre-tokenizer regex failed: ", reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch->data());
    const size_t m_begin = ov[0];
    const size_t m_end = ov[1];
    if (m_end == m_begin) {  // empty match: split here, step one character
      if (m_begin > emitted) {
        out->push_back(piece.substr(emitted, m_begin - emitted));
        emitted = m_begin;
      }
      size_t next = m_end + 1;
      while (next < piece.size() &&
             (static_cast<uint8_t>(piece[next]) & 0xC0) == 0x80) {
        ++next;
      }
      start = next;
      continue;
    }
    if (m_begin > emitted)
      out->push_back(piece.substr(emitted, m_begin - emitted));
    out->push_back(piece.substr(m_begin, m_end - m_begin));
    emitted = m_end;
    start = m_end;
  }
  if (emitted < piece.size()) out->push_back(piece.substr(emitted));
  return absl::OkStatus();
}

}  // namespace

absl::Status Pretokenizer::Split(absl::string_view text,
                                 std::vector<absl::string_view>* pieces) const {
  pieces->clear();
  if (text.empty()) return absl::OkStatus();
  pieces->push_back(text);
  if (regexes_.empty()) return absl::OkStatus();
  MatchScratch scratch;
  if (!scratch.ok()) return absl::ResourceExhaustedError("PCRE2 out of memory");
  std::vector<absl::string_view> next;
  for (const Compiled* re : regexes_) {
    next.clear();
    next.reserve(pieces->size() * 2);
    for (absl::string_view piece : *pieces) {
      absl::Status st = SplitPiece(re->code, piece, &scratch, &next);
      if (!st.ok()) return st;
    }
    pieces->swap(next);
  }
  return absl::OkStatus();
}

}  // namespace ckv::tokenizer_internal
