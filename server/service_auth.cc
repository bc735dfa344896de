#include "server/service_auth.h"

#include "absl/strings/string_view.h"

namespace ckv::server {

absl::StatusOr<std::string> CallerTenant(const ServiceState& state,
                                         const grpc::ServerContextBase& ctx) {
  const TokenStore* tokens = state.tokens();
  if (tokens == nullptr) return std::string(kAnonymousTenant);
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "missing credentials: send metadata 'authorization: Bearer TOKEN'");
  }
  const auto token =
      BearerToken(absl::string_view(it->second.data(), it->second.size()));
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        "malformed authorization metadata: expected 'Bearer TOKEN'");
  }
  auto tenant = tokens->TenantOf(*token);
  if (!tenant.has_value()) {
    return absl::UnauthenticatedError("unknown bearer token");
  }
  return *std::move(tenant);
}

}  // namespace ckv::server
