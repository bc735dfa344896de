#include "client/text_stream.h"

#include "absl/strings/str_cat.h"

namespace ckv::client {
namespace {

// Length of the sequence a lead byte starts; 0 for a continuation or an
// invalid byte.
int SequenceLength(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// True if bytes s[i+1], s[i+2].. make a valid sequence of length n with
// lead s[i] (no overlongs, no surrogates, <= U+10FFFF).
bool ValidSequence(std::string_view s, size_t i, int n) {
  if (i + n > s.size()) return false;
  for (int k = 1; k < n; ++k) {
    if (!IsContinuation(s[i + k])) return false;
  }
  const unsigned char lead = s[i];
  const unsigned char second = n > 1 ? s[i + 1] : 0;
  if (lead == 0xE0 && second < 0xA0) return false;  // overlong
  if (lead == 0xED && second > 0x9F) return false;  // surrogate
  if (lead == 0xF0 && second < 0x90) return false;  // overlong
  if (lead == 0xF4 && second > 0x8F) return false;  // > U+10FFFF
  return true;
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view s) {
  // Look back over at most 3 continuation bytes for the last lead byte.
  size_t i = s.size();
  int back = 0;
  while (i > 0 && back < 4) {
    --i;
    ++back;
    const unsigned char c = s[i];
    if (IsContinuation(c)) continue;
    const int n = SequenceLength(c);
    return (n > back) ? i : s.size();
  }
  return s.size();
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int n = SequenceLength(s[i]);
    if (n == 0 || !ValidSequence(s, i, n)) return i;
    i += n;
  }
  return std::string_view::npos;
}

Utf8ChunkReader::Utf8ChunkReader(std::istream& in, size_t chunk_bytes)
    : in_(in), chunk_bytes_(chunk_bytes < 4 ? 4 : chunk_bytes) {}

absl::StatusOr<bool> Utf8ChunkReader::Next(std::string* chunk) {
  std::string buf = std::move(carry_);
  carry_.clear();
  const size_t want = chunk_bytes_ - buf.size();
  const size_t old = buf.size();
  buf.resize(chunk_bytes_);
  in_.read(buf.data() + old, static_cast<std::streamsize>(want));
  buf.resize(old + static_cast<size_t>(in_.gcount()));
  if (in_.bad()) return absl::DataLossError("read error");
  if (buf.empty()) return false;
  const bool at_end = in_.eof();
  const size_t keep = at_end ? buf.size() : CompleteUtf8Prefix(buf);
  carry_ = buf.substr(keep);
  buf.resize(keep);
  if (const size_t bad = FindInvalidUtf8(buf); bad != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input is not valid UTF-8 (byte offset ", offset_ + bad, ")"));
  }
  offset_ += static_cast<int64_t>(buf.size());
  *chunk = std::move(buf);
  return true;
}

std::string LabelledPrinter::Label(int stream) {
  return absl::StrCat("[q", stream + 1, "] ");
}

void LabelledPrinter::Write(int stream, std::string_view piece) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string& pending = pending_[stream];
  pending.append(piece);
  // Whole lines only, so that concurrent answers interleave line by line;
  // long lines wrap at a space (or a character boundary) near kWrapBytes.
  while (true) {
    const size_t nl = pending.find('\n');
    if (nl != std::string::npos) {
      EmitLocked(stream, std::string_view(pending).substr(0, nl + 1));
      pending.erase(0, nl + 1);
      continue;
    }
    if (pending.size() < kWrapBytes) break;
    const std::string_view head = std::string_view(pending).substr(0, kWrapBytes);
    size_t cut = head.rfind(' ');
    if (cut == std::string_view::npos || cut == 0) {
      cut = CompleteUtf8Prefix(head);
    }
    if (cut == 0) break;
    EmitLocked(stream, head.substr(0, cut));
    EmitLocked(stream, "\n");
    pending.erase(0, cut);
  }
  out_.flush();
}

void LabelledPrinter::Finish(int stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(stream);
  if (it != pending_.end()) {
    EmitLocked(stream, it->second);
    pending_.erase(it);
  }
  if (line_owner_ == stream) {
    out_ << '\n';
    line_owner_ = -1;
  }
  out_.flush();
}

void LabelledPrinter::EmitLocked(int stream, std::string_view text) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (line_owner_ != stream) {
      if (line_owner_ != -1) out_ << '\n';
      out_ << Label(stream);
      line_owner_ = stream;
    }
    out_ << line;
    if (nl == std::string_view::npos) return;
    out_ << '\n';
    line_owner_ = -1;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace ckv::client
