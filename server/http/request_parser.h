// An HTTP/1.1 request parser (RFC 9112) on Boost.Beast's basic_parser with
// this server's limits: request-target length (414), header bytes and count
// (431), body size (413), and the framing rules that close a connection
// with 400: differing duplicate Content-Length, Content-Length with
// Transfer-Encoding, a transfer coding other than "chunked", bad chunking.
// Fed bytes incrementally; no I/O here (the fuzz target drives it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace ckv::server::http {

struct RequestLimits {
  int64_t max_uri_bytes = 8192;
  int64_t max_header_bytes = 16384;  // request line and header fields
  int max_header_count = 100;
  int64_t max_body_bytes = int64_t{16} << 20;
};

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // the request-target ("/v1/models?x=1")
  std::string path;    // target up to '?'
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool keep_alive = true;
  bool expect_continue = false;  // Expect: 100-continue

  // The first value of a header (case-insensitive name); "" when absent.
  absl::string_view Header(absl::string_view name) const;
  bool HasHeader(absl::string_view name) const;
};

class RequestParser {
 public:
  enum class State {
    kNeedMore,    // feed more bytes
    kHeaderDone,  // header parsed, body still to come (kNeedMore after it)
    kDone,        // request() is complete; the rest is the next request's
    kError,       // error_status() answers it; close the connection
  };

  explicit RequestParser(const RequestLimits& limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes a prefix of `data`; *consumed says how much. Bytes not consumed
  // must be passed again (with more appended) on the next call.
  State Feed(absl::string_view data, size_t* consumed);
  // Whether the header is complete (after kHeaderDone).
  bool header_done() const;

  HttpRequest& request();
  // kError: the HTTP status to answer (400, 413, 414, 431, 501) and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  class Impl;
  friend class Impl;
  const RequestLimits limits_;
  std::unique_ptr<Impl> impl_;
  bool request_line_ended_ = false;  // a '\n' seen at the request's start
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace ckv::server::http
