#include "server/http/listen_address.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ckv::server::http {

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag,
                                                 const std::string& address) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " must be HOST:PORT (", why, "), got '", address, "'"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  const std::string port = address.substr(colon + 1);
  ListenAddress a;
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &a.port) || a.port > 65535) {
    return bad("PORT is 0..65535");
  }
  a.host = address.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  } else if (a.host.find_first_of(":[]") != std::string::npos) {
    return bad("bracket an IPv6 HOST as [HOST]");
  }
  return a;
}

}  // namespace ckv::server::http
