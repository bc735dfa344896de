#include "server/http/request_parser.h"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ckv::server::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using beast::error_code;

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

bool HttpRequest::HasHeader(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) return true;
  }
  return false;
}

class RequestParser::Impl final : public bhttp::basic_parser<true> {
 public:
  Impl(RequestParser& owner, const RequestLimits& limits)
      : owner_(owner), limits_(limits) {
    header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
    body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
    eager(true);
  }

  HttpRequest request;

 private:
  // Our own refusals: Beast stops at any error; the status is kept here.
  void Refuse(error_code& ec, int status, std::string message) {
    owner_.error_status_ = status;
    owner_.error_message_ = std::move(message);
    ec = bhttp::error::bad_value;
  }

  void on_request_impl(bhttp::verb, beast::string_view method,
                       beast::string_view target, int version,
                       error_code& ec) override {
    if (static_cast<int64_t>(target.size()) > limits_.max_uri_bytes) {
      return Refuse(ec, 414,
                    absl::StrCat("request-target longer than ",
                                 limits_.max_uri_bytes, " bytes"));
    }
    if (version != 10 && version != 11) {
      return Refuse(ec, 505, "HTTP version not supported");
    }
    request.method.assign(method.data(), method.size());
    request.target.assign(target.data(), target.size());
    const size_t q = request.target.find('?');
    request.path = request.target.substr(0, q);
    request.version = version;
  }

  void on_response_impl(int, beast::string_view, int, error_code& ec) override {
    ec = bhttp::error::bad_method;
  }

  void on_field_impl(bhttp::field name, beast::string_view name_string,
                     beast::string_view value, error_code& ec) override {
    if (++fields_ > limits_.max_header_count) {
      return Refuse(ec, 431,
                    absl::StrCat("more than ", limits_.max_header_count,
                                 " header fields"));
    }
    absl::string_view v(value.data(), value.size());
    if (name == bhttp::field::transfer_encoding) {
      // Only "chunked" alone is a framing this server reads (RFC 9112
      // 6.1: a coding it does not understand is 501; 6.3: chunked not
      // last is 400). Content-Length with it: Beast refuses (400).
      const absl::string_view last =
          absl::StripAsciiWhitespace(v.substr(v.rfind(',') + 1));
      if (!absl::EqualsIgnoreCase(last, "chunked")) {
        return Refuse(ec, 400, "Transfer-Encoding must end with chunked");
      }
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v), "chunked")) {
        return Refuse(ec, 501, "only the chunked transfer coding is supported");
      }
    } else if (name == bhttp::field::expect) {
      if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(v),
                                  "100-continue")) {
        return Refuse(ec, 417, "only 'Expect: 100-continue' is supported");
      }
      request.expect_continue = true;
    }
    request.headers.emplace_back(
        std::string(name_string.data(), name_string.size()), std::string(v));
  }

  void on_header_impl(error_code&) override {
    request.keep_alive = keep_alive();
    if (request.version == 11 && !request.HasHeader("host")) {
      // RFC 9112 3.2: a request without Host is answered 400.
      owner_.error_status_ = 400;
      owner_.error_message_ = "HTTP/1.1 request without a Host header";
    }
  }

  void on_body_init_impl(const boost::optional<std::uint64_t>& length,
                         error_code&) override {
    if (length) request.body.reserve(static_cast<size_t>(*length));
  }

  std::size_t on_body_impl(beast::string_view body, error_code&) override {
    request.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, beast::string_view,
                            error_code&) override {}

  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                                 error_code&) override {
    request.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(error_code&) override {}

  RequestParser& owner_;
  const RequestLimits limits_;
  int fields_ = 0;
};

RequestParser::RequestParser(const RequestLimits& limits)
    : limits_(limits), impl_(std::make_unique<Impl>(*this, limits)) {}

RequestParser::~RequestParser() = default;

HttpRequest& RequestParser::request() { return impl_->request; }

bool RequestParser::header_done() const { return impl_->is_header_done(); }

namespace {

int StatusOfBeastError(const error_code& ec) {
  if (ec == bhttp::error::header_limit) return 431;
  if (ec == bhttp::error::body_limit) return 413;
  return 400;
}

}  // namespace

RequestParser::State RequestParser::Feed(absl::string_view data,
                                         size_t* consumed) {
  *consumed = 0;
  if (error_status_ != 0) return State::kError;
  // A request line that has not ended within the URI limit (plus room for
  // the method and version) is answered 414 before the header limit's 431.
  if (!request_line_ended_) {
    const size_t line_limit = static_cast<size_t>(limits_.max_uri_bytes) + 64;
    const size_t nl = data.substr(0, line_limit).find('\n');
    request_line_ended_ = nl != absl::string_view::npos;
    if (!request_line_ended_ && data.size() > line_limit) {
      error_status_ = 414;
      error_message_ = absl::StrCat("request-target longer than ",
                                    limits_.max_uri_bytes, " bytes");
      return State::kError;
    }
  }
  size_t total = 0;
  while (true) {
    // Boost 1.74's Beast asserts (builds without NDEBUG) when it re-scans a
    // chunked body's last chunk from fewer than 5 bytes, e.g. "0\r\n" then
    // "\r" (boostorg/beast#2861, fixed in 1.86); found by
    // http_request_fuzzer. Every valid rest of a chunked body holds at
    // least the 5 bytes of "0\r\n\r\n", so the parser waits for 5.
    constexpr size_t kMinChunkedRest = 5;
    if (impl_->is_header_done() && impl_->chunked() && !impl_->is_done() &&
        data.size() - total < kMinChunkedRest) {
      return State::kHeaderDone;
    }
    error_code ec;
    const size_t n = impl_->put(
        boost::asio::const_buffer(data.data() + total, data.size() - total),
        ec);
    total += n;
    *consumed = total;
    if (n > 0) request_line_ended_ = true;
    if (error_status_ != 0) {
      if (error_message_.empty()) error_message_ = "bad request";
      return State::kError;
    }
    if (ec == bhttp::error::need_more) {
      return impl_->is_header_done() ? State::kHeaderDone : State::kNeedMore;
    }
    if (ec) {
      error_status_ = StatusOfBeastError(ec);
      error_message_ =
          error_status_ == 413
              ? "request body too large"
              : (error_status_ == 431
                     ? "request header too large"
                     : absl::StrCat("malformed request: ", ec.message()));
      return State::kError;
    }
    if (impl_->is_done()) return State::kDone;
    if (n == 0) {
      return impl_->is_header_done() ? State::kHeaderDone : State::kNeedMore;
    }
  }
}

}  // namespace ckv::server::http
