// The status page of the HTTP port (docs/http-api.md "Status page"): the
// JSON body of GET /v1/status and the self-contained HTML page of GET /
// that polls it. No HTTP library here.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "server/status.h"

namespace ckv::server::http {

// Version of the JSON layout below; bumped when a field changes meaning or
// goes away (new fields may appear without a bump).
inline constexpr int kStatusSchemaVersion = 1;

// The body of GET /v1/status: a JSON object with the keys schema,
// time_unix_ms, version, draining, model, backend, sessions, queue,
// admission, totals, recall and history (docs/http-api.md lists each).
std::string StatusJson(const ServerStatus& status);

// The page of GET /: HTML with inline CSS and script, no external URL.
absl::string_view StatusPageHtml();

}  // namespace ckv::server::http
