#include "server/transport_security.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/security/server_credentials.h"

namespace ckv::server {
namespace {

// "host:port", "[v6]:port", "host" -> host (no brackets).
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? address.substr(1)
                                            : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  // More than one ':' without brackets: a bare IPv6 address.
  if (colon != absl::string_view::npos && address.find(':') == colon) {
    return address.substr(0, colon);
  }
  return address;
}

bool IsIpv4Loopback(absl::string_view host) {
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (absl::string_view p : parts) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 0 || v > 255) return false;
  }
  return true;
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": cannot read a PEM file at '", path, "'"));
  }
  return text.str();
}

}  // namespace

bool IsLoopbackAddress(absl::string_view listen_address) {
  const absl::string_view host = HostOf(listen_address);
  return host == "localhost" || host == "::1" || IsIpv4Loopback(host);
}

absl::Status ValidateTransportSecurity(const ServerConfig& config) {
  const TlsConfig& tls = config.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key must be given together");
  }
  if (!tls.client_ca_file.empty() && !tls.enabled()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (!tls.enabled() && !config.insecure &&
      !IsLoopbackAddress(config.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing plain TCP on non-loopback --listen '", config.listen_address,
        "': give --tls-cert/--tls-key, or --insecure to accept unencrypted "
        "traffic (e.g. behind a TLS-terminating proxy)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  auto cert = ReadPem("tls-cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("tls-key", tls.key_file);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!tls.client_ca_file.empty()) {
    auto ca = ReadPem("tls-client-ca", tls.client_ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace ckv::server
