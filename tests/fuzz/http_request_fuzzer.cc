// libFuzzer target: the HTTP/1.1 request parser (server/http/
// request_parser.h) on arbitrary bytes, fed as one connection would: byte 0
// picks how the rest is split into reads, then requests are parsed one
// after another (pipelining) until the input ends or one is refused.
//
// Checked invariants (violations trap): Feed never consumes more than it
// was given; a refusal has an HTTP error status (400, 413, 414, 417, 431,
// 501, 505) and a message; a complete request has a method, a target that
// starts its path and a body within the limit; no request's header has more
// fields than the limit.
//
// Seeds: tests/fuzz/corpus/http_request_fuzzer (scripts/fuzz.sh adds them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/http/request_parser.h"

namespace {

using ckv::server::http::RequestLimits;
using ckv::server::http::RequestParser;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool IsErrorStatus(int s) {
  return s == 400 || s == 413 || s == 414 || s == 417 || s == 431 || s == 501 ||
         s == 505;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // Small limits so that the fuzzer reaches them.
  RequestLimits limits;
  limits.max_uri_bytes = 256;
  limits.max_header_bytes = 1024;
  limits.max_header_count = 16;
  limits.max_body_bytes = 4096;
  const size_t step = 1 + data[0] % 64;  // bytes per "read"
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string buffered;
  size_t next = 0;
  auto parser = std::make_unique<RequestParser>(limits);
  int requests = 0;
  while (requests < 64) {
    if (next < input.size()) {
      buffered.append(input, next, step);
      next += step;
    } else if (buffered.empty()) {
      break;
    }
    size_t used = 0;
    const auto state = parser->Feed(buffered, &used);
    Check(used <= buffered.size());
    buffered.erase(0, used);
    if (state == RequestParser::State::kError) {
      Check(IsErrorStatus(parser->error_status()));
      Check(!parser->error_message().empty());
      break;
    }
    if (state == RequestParser::State::kDone) {
      const auto& r = parser->request();
      Check(!r.method.empty());
      Check(r.target.compare(0, r.path.size(), r.path) == 0);
      Check(static_cast<int64_t>(r.body.size()) <= limits.max_body_bytes);
      Check(static_cast<int>(r.headers.size()) <= limits.max_header_count);
      ++requests;
      parser = std::make_unique<RequestParser>(limits);
      continue;
    }
    if (next >= input.size()) break;  // needs more than there is
  }
  return 0;
}
