// Encoding and decoding of ckv::Tokenizer (construction: tokenizer_load.cc).

#include "model/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/hybriddna.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode_props.h"
#include "model/tokenizer/utf8.h"

namespace ckv {
namespace {

using tokenizer_internal::kAttrByte;
using tokenizer_internal::kAttrControl;
using tokenizer_internal::kAttrNormal;
using tokenizer_internal::kAttrUnknown;
using tokenizer_internal::kAttrUserDefined;
using tokenizer_internal::MergeWorkspace;
using tokenizer_internal::UnescapeRwkvToken;

constexpr absl::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581

// Longest accepted input; keeps every merge buffer offset within uint32.
constexpr size_t kMaxEncodeBytes = size_t{1} << 28;

// A piece of the input: a special token (token >= 0) or raw text.
struct Fragment {
  int32_t token;
  size_t offset;
  size_t length;
};

// Splits every raw fragment on each occurrence of `special`'s text (leftmost
// first, non-overlapping), as llama.cpp's tokenizer_st_partition.
void SplitOn(absl::string_view text, int32_t special, absl::string_view needle,
             std::vector<Fragment>* fragments) {
  std::vector<Fragment> out;
  out.reserve(fragments->size());
  for (const Fragment& f : *fragments) {
    if (f.token >= 0 || f.length < needle.size()) {
      out.push_back(f);
      continue;
    }
    const absl::string_view raw = text.substr(f.offset, f.length);
    size_t pos = 0;
    for (size_t hit = raw.find(needle); hit != absl::string_view::npos;
         hit = raw.find(needle, pos)) {
      if (hit > pos) out.push_back({-1, f.offset + pos, hit - pos});
      out.push_back({special, 0, 0});
      pos = hit + needle.size();
    }
    if (pos < raw.size()) out.push_back({-1, f.offset + pos, raw.size() - pos});
  }
  fragments->swap(out);
}

// Replaces every ' ' by U+2581, appending to *out.
void AppendEscapedSpaces(absl::string_view s, std::string* out) {
  for (char c : s) {
    if (c == ' ') {
      out->append(kSpmSpace.data(), kSpmSpace.size());
    } else {
      out->push_back(c);
    }
  }
}

// SPM normal token: U+2581 -> ' '.
std::string UnescapeSpaces(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// BPE normal token: byte-level characters -> bytes; characters outside the
// byte-level alphabet (and ill-formed bytes) are copied unchanged.
std::string DecodeByteLevel(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const int len = tokenizer_internal::DecodeUtf8Char(s.substr(i), &cp);
    if (len <= 0) {
      out.push_back(s[i++]);
      continue;
    }
    const int byte = tokenizer_internal::UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(s.data() + i, static_cast<size_t>(len));
    }
    i += static_cast<size_t>(len);
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xXX>" -> the byte; anything else -> "".
std::string ByteTokenPiece(absl::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') {
    return "";
  }
  const int hi = HexDigit(text[3]);
  const int lo = HexDigit(text[4]);
  if (hi < 0 || lo < 0) return "";
  return std::string(1, static_cast<char>(hi * 16 + lo));
}

// Segments of `raw` between whitespace characters (which are dropped), each
// lowercased when `lowercase`, as llama.cpp's "whitespace" tokenizer.
std::vector<std::string> WhitespaceSegments(absl::string_view raw,
                                            bool lowercase) {
  std::vector<std::string> segments(1);
  size_t i = 0;
  while (i < raw.size()) {
    uint32_t cp = 0;
    const int len = tokenizer_internal::DecodeUtf8Char(raw.substr(i), &cp);
    i += len > 0 ? static_cast<size_t>(len) : 1;
    if (len <= 0) cp = 0xFFFD;
    if (tokenizer_internal::IsUnicodeWhitespace(cp)) {
      if (!segments.back().empty()) segments.emplace_back();
      continue;
    }
    tokenizer_internal::AppendUtf8(
        lowercase ? tokenizer_internal::UnicodeToLower(cp) : cp,
        &segments.back());
  }
  if (segments.back().empty()) segments.pop_back();
  return segments;
}

// Pre-tokenizes `subject` and BPE-encodes every piece.
absl::Status EncodeBpeText(const Tokenizer::Impl& im, absl::string_view subject,
                           MergeWorkspace* ws,
                           std::vector<absl::string_view>* pieces,
                           std::vector<int32_t>* out) {
  if (absl::Status s = im.pretok->Split(subject, pieces); !s.ok()) return s;
  for (absl::string_view piece : *pieces) im.bpe->EncodePiece(piece, ws, out);
  return absl::OkStatus();
}

}  // namespace

namespace tokenizer_internal {

std::string ComputePiece(const Tokenizer::Impl& impl, int32_t id) {
  if (!impl.vocab.Valid(id)) return "";
  const uint32_t attr = impl.vocab.attr[id];
  const std::string& text = impl.vocab.text[id];
  if (impl.type == TokenizerType::kRwkv) return UnescapeRwkvToken(text);
  if (impl.type == TokenizerType::kPlamo2) {  // text as is, bytes decoded
    return (attr & kAttrByte) ? ByteTokenPiece(text) : text;
  }
  if (attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) return text;
  if (attr & kAttrNormal) {
    const bool byte_level = (impl.type == TokenizerType::kBpe ||
                             impl.type == TokenizerType::kWhitespaceBpe ||
                             impl.type == TokenizerType::kHybridDna) &&
                            !impl.escape_whitespaces;
    if (!byte_level) return UnescapeSpaces(text);
    absl::string_view shown = text;
    if (impl.dna_oov >= 0 && id > impl.dna_oov &&
        absl::EndsWith(shown, tokenizer_internal::kDnaKmerMarker)) {
      shown.remove_suffix(tokenizer_internal::kDnaKmerMarker.size());
    }
    return DecodeByteLevel(shown);
  }
  if (attr & kAttrByte) return ByteTokenPiece(text);
  return "";  // undefined / unused
}

}  // namespace tokenizer_internal

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(
    absl::string_view text, bool add_special, bool parse_special) const {
  if (text.size() > kMaxEncodeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("text too long to tokenize (", text.size(),
                     " bytes, limit ", kMaxEncodeBytes, ")"));
  }
  const size_t bad = tokenizer_internal::FirstInvalidUtf8(text);
  if (bad != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is not valid UTF-8 (byte offset ", bad, ")"));
  }
  const Impl& im = *impl_;
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  for (int32_t id : im.special_ids) {
    if (!parse_special && (im.vocab.attr[id] & (kAttrControl | kAttrUnknown))) {
      continue;  // user-defined tokens are matched even without parse_special
    }
    SplitOn(text, id, im.vocab.text[id], &fragments);
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  // RWKV and PLaMo-2 never add BOS/EOS, as in llama.cpp.
  const bool rwkv =
      im.type == TokenizerType::kRwkv || im.type == TokenizerType::kPlamo2;
  if (add_special && im.add_bos && !rwkv) out.push_back(im.bos);
  MergeWorkspace ws;
  std::string escaped;
  std::vector<absl::string_view> pieces;
  bool prev_special = true;  // SPM: a space prefix starts each text run
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const absl::string_view raw = text.substr(f.offset, f.length);
    switch (im.type) {
      case TokenizerType::kSentencePiece:
        escaped.clear();
        if (im.add_space_prefix && prev_special)
          escaped.assign(kSpmSpace.data(), kSpmSpace.size());
        AppendEscapedSpaces(raw, &escaped);
        im.spm->Encode(escaped, &ws, &out);
        break;
      case TokenizerType::kBpe:
      case TokenizerType::kGemma4: {
        absl::string_view subject = raw;
        if (im.escape_whitespaces) {
          escaped.clear();
          AppendEscapedSpaces(raw, &escaped);
          subject = escaped;
        }
        if (absl::Status s = EncodeBpeText(im, subject, &ws, &pieces, &out);
            !s.ok()) {
          return s;
        }
        break;
      }
      case TokenizerType::kHybridDna: {
        auto bpe = [&](absl::string_view part) {
          return EncodeBpeText(im, part, &ws, &pieces, &out);
        };
        if (absl::Status s =
                tokenizer_internal::EncodeHybridDna(im.vocab, raw, bpe, &out);
            !s.ok()) {
          return s;
        }
        break;
      }
      case TokenizerType::kWhitespaceBpe:
        for (const std::string& seg : WhitespaceSegments(raw, im.lowercase)) {
          if (absl::Status s = EncodeBpeText(im, seg, &ws, &pieces, &out);
              !s.ok()) {
            return s;
          }
        }
        break;
      case TokenizerType::kUnigram:
      case TokenizerType::kRwkv:
      case TokenizerType::kWordPiece:
      case TokenizerType::kPlamo2:
        if (absl::Status s = im.other->Encode(raw, &out); !s.ok()) return s;
        break;
    }
    prev_special = false;
  }
  if (add_special && im.add_eos && !rwkv) out.push_back(im.eos);
  if (add_special && im.type == TokenizerType::kWordPiece) {
    out.push_back(im.sep);
  }
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (!impl_->vocab.Valid(id)) return "";
  if (!render_special && IsControl(id)) return "";
  return impl_->pieces[id];
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids,
                              bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (!impl_->vocab.Valid(id)) continue;
    if (!render_special && IsControl(id)) continue;
    out += impl_->pieces[id];
  }
  return out;
}

TokenizerType Tokenizer::type() const { return impl_->type; }
int32_t Tokenizer::vocab_size() const { return impl_->vocab.size(); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::eot_id() const { return impl_->eot; }
int32_t Tokenizer::unk_id() const { return impl_->unk; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(impl_->eog_ids.begin(), impl_->eog_ids.end(), id);
}

const std::vector<int32_t>& Tokenizer::eog_ids() const {
  return impl_->eog_ids;
}

bool Tokenizer::IsControl(int32_t id) const {
  return impl_->vocab.Has(id, kAttrControl | kAttrUnknown);
}

absl::string_view Tokenizer::TokenText(int32_t id) const {
  return impl_->vocab.Valid(id) ? absl::string_view(impl_->vocab.text[id])
                                : absl::string_view();
}

}  // namespace ckv
