#include "server/auth.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ckv::server {
namespace {

bool ValidTenant(absl::string_view t) {
  return !t.empty() && t.size() <= 64 &&
         std::all_of(t.begin(), t.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                  c == '-' || c == '_' || c == '.';
         });
}

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("tokens file line ", line, ": ", what));
}

}  // namespace

absl::StatusOr<TokenMap> ParseTokens(absl::string_view text) {
  TokenMap map;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return LineError(line_no, "expected 'TOKEN TENANT'");
    }
    if (!ValidTenant(fields[1])) {
      return LineError(line_no,
                       "tenant must be 1-64 characters of [A-Za-z0-9_.-]");
    }
    if (!map.emplace(fields[0], fields[1]).second) {
      return LineError(line_no, "token listed twice");
    }
  }
  return map;
}

absl::Status TokenStore::Reload() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read tokens file '", path_, "'"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto map = ParseTokens(text.str());
  if (!map.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path_, "': ", map.status().message()));
  }
  absl::MutexLock lock(&mu_);
  tokens_ = *std::move(map);
  return absl::OkStatus();
}

std::optional<std::string> TokenStore::TenantOf(absl::string_view token) const {
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return std::nullopt;
  return it->second;
}

int TokenStore::tokens() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(tokens_.size());
}

int TokenStore::tenants() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<absl::string_view> names;
  for (const auto& [token, tenant] : tokens_) names.insert(tenant);
  return static_cast<int>(names.size());
}

std::optional<absl::string_view> BearerToken(absl::string_view header) {
  constexpr absl::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size() ||
      !absl::StartsWithIgnoreCase(header, kScheme)) {
    return std::nullopt;
  }
  absl::string_view token =
      absl::StripAsciiWhitespace(header.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

}  // namespace ckv::server
