#include "server/http/response_head.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::server::http {

const char* Reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 500 ? "Client Error" : "Server Error";
  }
}

// Status line and header of `r`; the body follows (Content-Length) unless
// `chunked`.
std::string ResponseHead(const HttpResponse& r, bool chunked, bool close) {
  std::string head =
      absl::StrFormat("HTTP/1.1 %d %s\r\n", r.status, Reason(r.status));
  if (!r.content_type.empty()) {
    absl::StrAppend(&head, "Content-Type: ", r.content_type, "\r\n");
  }
  for (const auto& [k, v] : r.headers)
    absl::StrAppend(&head, k, ": ", v, "\r\n");
  if (r.stream == nullptr) {
    absl::StrAppend(&head, "Content-Length: ", r.body.size(), "\r\n");
  } else if (chunked) {
    head += "Transfer-Encoding: chunked\r\n";
  }
  if (close) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

std::string ErrorJson(int status, absl::string_view message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return absl::StrCat("{\"error\": {\"message\": \"", escaped,
                      "\", \"type\": \"invalid_request_error\", "
                      "\"param\": null, \"code\": \"http_",
                      status, "\"}}");
}

}  // namespace ckv::server::http
