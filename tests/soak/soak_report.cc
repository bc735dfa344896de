#include "tests/soak/soak_report.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_format.h"

namespace ckv::soak {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double Mib(int64_t bytes) { return bytes < 0 ? -1.0 : bytes / kMiB; }

// Non-OK codes over all RPCs.
std::map<std::string, int64_t> ErrorsByCode(const Tally& t) {
  std::map<std::string, int64_t> errors;
  for (const auto& [rpc, codes] : t.by_rpc) {
    for (const auto& [code, n] : codes) {
      if (code != "OK") errors[code] += n;
    }
  }
  return errors;
}

int64_t OkCount(const Tally& t) {
  int64_t ok = 0;
  for (const auto& [rpc, codes] : t.by_rpc) {
    auto it = codes.find("OK");
    if (it != codes.end()) ok += it->second;
  }
  return ok;
}

nlohmann::json CapacityJson(const Capacity& c) {
  return {{"free_sessions", c.free_sessions},
          {"free_host_kv_bytes", c.free_host_kv_bytes},
          {"free_device_kv_bytes", c.free_device_kv_bytes},
          {"queued_requests", c.queued_requests}};
}

// First and last known RSS, and the peak.
void RssFigures(const std::vector<Sample>& samples, int64_t* start,
                int64_t* end, int64_t* peak) {
  *start = *end = *peak = -1;
  for (const Sample& s : samples) {
    if (s.rss_bytes < 0) continue;
    if (*start < 0) *start = s.rss_bytes;
    *end = s.rss_bytes;
    *peak = std::max(*peak, s.rss_bytes);
  }
}

void PrintCodeTable(
    const std::map<std::string, std::map<std::string, int64_t>>& rows,
    const char* title, std::ostream& out) {
  std::set<std::string> codes;
  for (const auto& [k, c] : rows) {
    for (const auto& [code, n] : c) codes.insert(code);
  }
  out << absl::StrFormat("%-18s", title);
  for (const std::string& c : codes) out << absl::StrFormat(" %10.10s", c);
  out << "\n";
  for (const auto& [k, c] : rows) {
    out << absl::StrFormat("%-18s", k);
    for (const std::string& code : codes) {
      auto it = c.find(code);
      out << absl::StrFormat(" %10d", it == c.end() ? 0 : it->second);
    }
    out << "\n";
  }
}

}  // namespace

double RssGrowthMiBPerHour(const std::vector<Sample>& samples) {
  if (samples.empty()) return 0.0;
  const double half = samples.back().seconds / 2;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Sample& s : samples) {
    if (s.seconds < half || s.rss_bytes < 0) continue;
    const double y = Mib(s.rss_bytes);
    n += 1;
    sx += s.seconds;
    sy += y;
    sxx += s.seconds * s.seconds;
    sxy += s.seconds * y;
  }
  const double denominator = n * sxx - sx * sx;
  if (n < 3 || denominator <= 0) return 0.0;
  return (n * sxy - sx * sy) / denominator * 3600.0;
}

nlohmann::json ToJson(const SoakResult& r) {
  int64_t rss_start, rss_end, rss_peak;
  RssFigures(r.samples, &rss_start, &rss_end, &rss_peak);
  int64_t peak_host = 0;
  for (const Sample& s : r.samples) {
    peak_host = std::max(peak_host, s.host_kv_bytes);
  }
  const Tally& t = r.tally;
  nlohmann::json j = {
      {"clients", r.clients},
      {"seconds", r.seconds},
      {"seed", r.seed},
      {"sessions_created", t.sessions_created},
      {"requests", t.requests},
      {"requests_per_second", r.seconds > 0 ? t.requests / r.seconds : 0.0},
      {"ok", OkCount(t)},
      {"errors_by_code", ErrorsByCode(t)},
      {"resource_exhausted_by_limit", t.exhausted_by_limit},
      {"codes_by_rpc", t.by_rpc},
      {"codes_by_action", t.by_action},
      {"unexpected", t.unexpected},
      {"aborted_after_cancel", t.aborted_after_cancel},
      {"unexpected_messages", t.unexpected_messages},
      {"generated_tokens", t.generated_tokens},
      {"prefilled_tokens", t.prefilled_tokens},
      {"rss_start_mb", Mib(rss_start)},
      {"rss_end_mb", Mib(rss_end)},
      {"rss_peak_mb", Mib(rss_peak)},
      {"rss_growth_per_hour_mb", RssGrowthMiBPerHour(r.samples)},
      {"rss_samples", r.samples.size()},
      {"peak_host_kv_bytes", peak_host},
      {"kv_bytes_baseline_ok", r.kv_bytes_baseline_ok},
      {"kv_baseline", CapacityJson(r.baseline)},
      {"kv_end", CapacityJson(r.end)},
      {"sessions_left", r.sessions_left},
      {"snapshot_files_left", r.snapshot_files_left},
      {"server_exit_code", r.server_exit_code},
      {"passed", r.failure.empty()},
      {"failure", r.failure},
  };
  return j;
}

void PrintSummary(const SoakResult& r, std::ostream& out) {
  const Tally& t = r.tally;
  out << "\n== soak: " << r.clients << " clients, "
      << absl::StrFormat("%.1f", r.seconds) << " s, seed " << r.seed << "\n";
  PrintCodeTable(t.by_action, "action", out);
  out << "\n";
  PrintCodeTable(t.by_rpc, "rpc", out);
  int64_t rss_start, rss_end, rss_peak;
  RssFigures(r.samples, &rss_start, &rss_end, &rss_peak);
  out << absl::StrFormat(
      "\nsessions created %d, requests %d (%.1f/s), unexpected %d, "
      "generated tokens %d, prefilled tokens %d\n",
      t.sessions_created, t.requests,
      r.seconds > 0 ? t.requests / r.seconds : 0.0, t.unexpected,
      t.generated_tokens, t.prefilled_tokens);
  out << "errors by code:";
  for (const auto& [code, n] : ErrorsByCode(t)) out << " " << code << "=" << n;
  out << " (ABORTED just after a cancel on the session: "
      << t.aborted_after_cancel << ")\nRESOURCE_EXHAUSTED by limit:";
  for (const auto& [limit, n] : t.exhausted_by_limit) {
    out << " " << limit << "=" << n;
  }
  out << "\n";
  if (rss_start >= 0) {
    out << absl::StrFormat(
        "server RSS: start %.1f MiB, end %.1f MiB, peak %.1f MiB, "
        "growth %.1f MiB/hour (second half, %d samples)\n",
        Mib(rss_start), Mib(rss_end), Mib(rss_peak),
        RssGrowthMiBPerHour(r.samples), r.samples.size());
  }
  out << absl::StrFormat(
      "KV after closing: free sessions %d/%d, free host bytes %d/%d, "
      "free device bytes %d/%d, sessions left %d -> %s\n",
      r.end.free_sessions, r.baseline.free_sessions, r.end.free_host_kv_bytes,
      r.baseline.free_host_kv_bytes, r.end.free_device_kv_bytes,
      r.baseline.free_device_kv_bytes, r.sessions_left,
      r.kv_bytes_baseline_ok ? "baseline" : "NOT BASELINE");
  if (r.snapshot_files_left >= 0) {
    out << "snapshot files left: " << r.snapshot_files_left << "\n";
  }
  if (r.server_exit_code >= 0) {
    out << "server exit code after SIGTERM: " << r.server_exit_code << "\n";
  }
  for (const std::string& m : t.unexpected_messages) {
    out << "unexpected: " << m << "\n";
  }
  out << (r.failure.empty() ? "PASS" : "FAIL: " + r.failure) << "\n";
}

}  // namespace ckv::soak
