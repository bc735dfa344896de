// The bytes of an HTTP/1.1 answer's head, and the transport's own error
// bodies (http_transport.cc).
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "server/http/http_transport.h"

namespace ckv::server::http {

// The reason phrase of `status` (RFC 9110 §15; 499 as nginx names it).
const char* Reason(int status);

// Status line and header of `r`; the body follows (Content-Length) unless
// `chunked`; "Connection: close" when `close`.
std::string ResponseHead(const HttpResponse& r, bool chunked, bool close);

// An OpenAI-shaped error body (code "http_<status>") for the answers the
// transport gives by itself (400, 408, 413, 414, 431, 503, ...).
std::string ErrorJson(int status, absl::string_view message);

}  // namespace ckv::server::http
