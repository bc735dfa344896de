// See hybriddna.h.

#include "model/tokenizer/hybriddna.h"

namespace ckv::tokenizer_internal {
namespace {

constexpr size_t kKmer = 6;

void EmitKmers(const Vocab& vocab, absl::string_view dna, int32_t oov,
               std::vector<int32_t>* out) {
  std::string seq(dna);
  for (char& c : seq) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  for (size_t i = 0; i < seq.size(); i += kKmer) {
    std::string kmer = seq.substr(i, kKmer);
    kmer.append(kKmer - kmer.size(), 'A');
    kmer.append(kDnaKmerMarker.data(), kDnaKmerMarker.size());
    const int32_t id = vocab.Find(kmer);
    out->push_back(id >= 0 ? id : oov);
  }
}

}  // namespace

absl::Status EncodeHybridDna(
    const Vocab& vocab, absl::string_view text,
    const std::function<absl::Status(absl::string_view)>& bpe,
    std::vector<int32_t>* out) {
  constexpr absl::string_view kOpen = "<dna>", kClose = "</dna>";
  const int32_t open = vocab.Find(kOpen), close = vocab.Find(kClose);
  const int32_t oov = vocab.Find("<oov>");
  if (open < 0 || close < 0 || oov < 0) return bpe(text);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = text.find(kOpen, pos);
    if (start == absl::string_view::npos) return bpe(text.substr(pos));
    if (start > pos) {
      if (absl::Status s = bpe(text.substr(pos, start - pos)); !s.ok()) {
        return s;
      }
    }
    out->push_back(open);
    const size_t body = start + kOpen.size();
    const size_t end = text.find(kClose, body);
    EmitKmers(vocab,
              text.substr(body, end == absl::string_view::npos
                                    ? absl::string_view::npos
                                    : end - body),
              oov, out);
    if (end == absl::string_view::npos) break;
    out->push_back(close);
    pos = end + kClose.size();
  }
  return absl::OkStatus();
}

}  // namespace ckv::tokenizer_internal
