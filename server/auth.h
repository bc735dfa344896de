// Bearer-token authentication: a file of "TOKEN TENANT" lines maps each
// token to the tenant (a name) whose sessions the caller may use. No gRPC
// here; server/service_auth.h reads the `authorization` metadata.
//
// Tokens are secrets: nothing here logs them or puts them in a status
// message (parse errors name the line number only).
#pragma once

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace ckv::server {

using TokenMap = absl::flat_hash_map<std::string, std::string>;

// Parses the tokens file format: one "TOKEN TENANT" per line (separated by
// spaces or tabs), blank lines and lines starting with '#' ignored.
// INVALID_ARGUMENT naming the line for anything else, or a token listed
// twice. Tenant names are 1-64 characters of [A-Za-z0-9_.-].
absl::StatusOr<TokenMap> ParseTokens(absl::string_view text);

// The tokens of one file, reloadable while calls look tokens up.
class TokenStore {
 public:
  explicit TokenStore(std::string path) : path_(std::move(path)) {}

  // (Re)reads the file. On error the previous tokens stay in force.
  absl::Status Reload();
  // The tenant of `token`, or nullopt for an unknown one.
  std::optional<std::string> TenantOf(absl::string_view token) const;
  // Tokens and distinct tenants currently loaded.
  int tokens() const;
  int tenants() const;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  mutable absl::Mutex mu_;
  TokenMap tokens_ ABSL_GUARDED_BY(mu_);
};

// The token of an `authorization` metadata value "Bearer <token>" (scheme
// case-insensitive), or nullopt when it has another form.
std::optional<absl::string_view> BearerToken(absl::string_view header);

}  // namespace ckv::server
