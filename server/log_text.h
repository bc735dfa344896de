// Client-controlled text made safe for log lines and error messages: at most
// a short prefix, with everything that could end a line, forge one or
// reorder how it displays escaped. Depends on nothing above absl.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ckv::server {

// How much of a client-supplied value error messages quote.
inline constexpr size_t kQuotedPrefixBytes = 64;

// `text` with printable ASCII and printable UTF-8 kept, and as \xNN (bytes)
// or \u{XXXX} (code points) escaped: control characters (C0, DEL, C1),
// invalid UTF-8, bidirectional controls (U+061C, U+200E, U+200F,
// U+202A..U+202E, U+2066..U+2069), U+2028, U+2029 and U+FEFF; '\' becomes
// "\\". Only the first `max_bytes` bytes of `text` are kept; a longer text
// ends with "...(N bytes)" where N is its full size.
std::string EscapeText(absl::string_view text, size_t max_bytes = 256);

// EscapeText with spaces escaped too (\x20): one "key=value" field of a log
// line that client text cannot split into more fields.
std::string EscapeLogField(absl::string_view text, size_t max_bytes = 256);

}  // namespace ckv::server
