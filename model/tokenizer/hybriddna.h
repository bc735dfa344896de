// DNA spans of the "hybriddna" tokenizer model (llama.cpp's): text between
// "<dna>" and "</dna>" is cut into 6-mers looked up by their reserved-marker
// token texts; everything else is ordinary BPE text. Not part of the public
// API.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/vocab.h"

namespace ckv::tokenizer_internal {

// U+E000, appended to k-mer token texts so they stay distinct from equal BPE
// tokens; decoding drops it.
inline constexpr absl::string_view kDnaKmerMarker = "\xEE\x80\x80";

// Encodes `text`: each "<dna>" becomes its token, the DNA up to the next
// "</dna>" (or the end) becomes 6-mers (ASCII letters uppercased; a short
// tail padded with 'A'; a k-mer with no token becomes "<oov>"), then the
// "</dna>" token when present; text outside DNA spans goes to `bpe`. When the
// vocabulary lacks "<dna>", "</dna>" or "<oov>" all text goes to `bpe`.
absl::Status EncodeHybridDna(
    const Vocab& vocab, absl::string_view text,
    const std::function<absl::Status(absl::string_view)>& bpe,
    std::vector<int32_t>* out);

}  // namespace ckv::tokenizer_internal
