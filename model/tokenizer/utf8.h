// UTF-8 helpers shared by the tokenizer: strict validation, incremental
// decoding (for the streaming detokenizer) and the GPT-2 byte-level mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ckv::tokenizer_internal {

// Result of DecodeUtf8Char: length > 0 for a well-formed character,
// kUtf8Truncated when the bytes are a valid but incomplete prefix that ends
// the input, kUtf8Invalid when the first byte cannot start a well-formed
// character here (callers skip one byte).
inline constexpr int kUtf8Truncated = 0;
inline constexpr int kUtf8Invalid = -1;

// Decodes one character at the start of `s` (strict RFC 3629: no overlong
// forms, surrogates or code points above U+10FFFF). On success stores the code
// point in *cp (when cp is non-null) and returns its byte length.
int DecodeUtf8Char(absl::string_view s, uint32_t* cp);

// Returns the byte offset of the first ill-formed sequence, or s.size() when
// the whole string is valid UTF-8 (a truncated tail counts as ill-formed).
size_t FirstInvalidUtf8(absl::string_view s);

// Sequence length announced by a lead byte; 1 for ASCII, continuation and
// invalid bytes (the same convention as llama.cpp's unicode_len_utf8).
int Utf8LenFromLead(uint8_t lead);

// Appends the UTF-8 encoding of `cp` (must be <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// U+FFFD, the replacement character, as UTF-8.
inline constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

// GPT-2 byte-level encoding: the UTF-8 text of the code point that stands for
// byte `b` in byte-level BPE vocabularies.
absl::string_view ByteToUnicode(uint8_t b);

// Inverse of ByteToUnicode on code points: the byte, or -1 for a code point
// that no byte maps to.
int UnicodeToByte(uint32_t cp);

}  // namespace ckv::tokenizer_internal
