// UTF-8 aware text plumbing of the client: document chunking for Prefill and
// the labelled, interleaved printing of concurrent answers.
#ifndef CLUSTERKV_CLIENT_TEXT_STREAM_H_
#define CLUSTERKV_CLIENT_TEXT_STREAM_H_

#include <cstddef>
#include <istream>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ckv::client {

// Length of the longest prefix of `s` that does not end inside a UTF-8
// sequence (an incomplete trailing sequence is left out; invalid bytes are
// not this function's concern and count as complete).
size_t CompleteUtf8Prefix(std::string_view s);

// Offset of the first byte that is not well-formed UTF-8, or npos.
size_t FindInvalidUtf8(std::string_view s);

// Reads a stream in chunks of at most `chunk_bytes`, each ending on a UTF-8
// character boundary (proto3 strings must be valid UTF-8).
class Utf8ChunkReader {
 public:
  Utf8ChunkReader(std::istream& in, size_t chunk_bytes);

  // Sets *chunk to the next chunk; false at the end. INVALID_ARGUMENT when
  // the text is not valid UTF-8, DATA_LOSS on a read error.
  absl::StatusOr<bool> Next(std::string* chunk);
  int64_t bytes_read() const { return offset_; }

 private:
  std::istream& in_;
  size_t chunk_bytes_;
  std::string carry_;  // incomplete character from the previous read
  int64_t offset_ = 0;
};

// Prints pieces of several concurrent streams to one output so that every
// line starts with the label of its stream ("[q1] "). Text is released a
// whole line at a time (long lines wrap near kWrapBytes, at a space or a
// UTF-8 character boundary), so concurrent answers interleave line by line;
// Finish prints the rest. Thread-safe; flushes after every piece.
class LabelledPrinter {
 public:
  explicit LabelledPrinter(std::ostream& out) : out_(out) {}

  void Write(int stream, std::string_view piece);
  // Ends the stream: prints what is pending and closes its open line.
  void Finish(int stream);

  static std::string Label(int stream);  // "[q<stream+1>] "
  static constexpr size_t kWrapBytes = 72;

 private:
  void EmitLocked(int stream, std::string_view text);

  std::mutex mu_;
  std::ostream& out_;
  int line_owner_ = -1;  // stream whose line is open, -1 none
  std::map<int, std::string> pending_;
};

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_TEXT_STREAM_H_
