#include "client/connect.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ckv::client {
namespace {

absl::StatusOr<std::string> ReadFile(const char* flag,
                                     const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads `path` into `*out` when `path` is set.
absl::Status ReadIfSet(const char* flag, const std::string& path,
                       std::string* out) {
  if (path.empty()) return absl::OkStatus();
  auto text = ReadFile(flag, path);
  if (!text.ok()) return text.status();
  *out = *std::move(text);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  auto text = ReadFile("token-file", path);
  if (!text.ok()) return text.status();
  const std::string first = text->substr(0, text->find('\n'));
  std::string token(absl::StripAsciiWhitespace(first));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token-file: no token on the first line of '", path, "'"));
  }
  return token;
}

}  // namespace

absl::StatusOr<ChannelSecurity> ChannelSecurityFrom(const ClientOptions& o) {
  ChannelSecurity c;
  c.tls = o.tls;
  c.server_name = o.tls_server_name;
  if (auto s = ReadIfSet("tls-ca", o.tls_ca, &c.ca_pem); !s.ok()) return s;
  if (auto s = ReadIfSet("tls-cert", o.tls_cert, &c.cert_pem); !s.ok()) {
    return s;
  }
  if (auto s = ReadIfSet("tls-key", o.tls_key, &c.key_pem); !s.ok()) return s;
  c.token = o.token;
  if (!o.token_file.empty()) {
    auto token = ReadToken(o.token_file);
    if (!token.ok()) return token.status();
    c.token = *std::move(token);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<RpcClient>> ConnectFrom(const ClientOptions& o) {
  auto security = ChannelSecurityFrom(o);
  if (!security.ok()) return security.status();
  return RpcClient::Connect(o.server, o.timeout_seconds, *security);
}

}  // namespace ckv::client
