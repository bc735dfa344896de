// Tests of ServerMetrics (server/metrics.h) and its endpoint on
// --metrics-address (server/http/metrics_endpoint.h): values in the text
// exposition, scrapes over a real socket (keep-alive, pipelined, HEAD),
// address and port errors, restart, `promtool check metrics` (when
// installed). The binary links the whole server (OpenBLAS; with CUDA also
// the CUDA runtime and cuBLASLt), whose static TLS broke prometheus-cpp's
// civetweb threads (docs/building.md, pitfall 1): the scrapes here run with
// that TLS present, on the transport's I/O thread.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/metrics_endpoint.h"
#include "server/metrics.h"
#include "server/server_config.h"

#if CLUSTERKV_TEST_CUDA_TLS
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#endif

namespace ckv::server {
namespace {

// ---- Socket helpers
// -----------------------------------------------------------

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A port that was free a moment ago (bind to 0, read it back, close).
int FreePort() {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = Loopback(0);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return -1;
  }
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Connects to 127.0.0.1:port; -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct HttpResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// Splits the first response off `*all` (head + Content-Length bytes; the
// head alone after HEAD); false while incomplete.
bool TakeResponse(std::string* all, bool head_only, HttpResponse* r) {
  const size_t head_end = all->find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  const std::string head = all->substr(0, head_end);
  size_t length = 0;
  const size_t cl = head.find("Content-Length: ");
  if (cl != std::string::npos && !head_only) {
    length = std::strtoul(head.c_str() + cl + 16, nullptr, 10);
  }
  if (all->size() < head_end + 4 + length) return false;
  r->head = head;
  r->body = all->substr(head_end + 4, length);
  all->erase(0, head_end + 4 + length);
  if (std::sscanf(r->head.c_str(), "HTTP/1.%*d %d", &r->status) != 1) {
    ADD_FAILURE() << "bad status line: " << r->head;
  }
  return true;
}

// Sends `raw` (one or more requests) and reads `count` responses (the
// connection is kept alive as a scraper keeps it); `head_only` for HEAD.
std::vector<HttpResponse> HttpRawN(int port, const std::string& raw, int count,
                                   bool head_only = false) {
  std::vector<HttpResponse> out;
  Fd fd(Connect(port));
  if (fd.get() < 0) {
    ADD_FAILURE() << "connect to 127.0.0.1:" << port << " failed";
    return out;
  }
  if (send(fd.get(), raw.data(), raw.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(raw.size())) {
    ADD_FAILURE() << "send failed";
    return out;
  }
  std::string all;
  char buf[4096];
  while (static_cast<int>(out.size()) < count) {
    HttpResponse r;
    if (TakeResponse(&all, head_only, &r)) {
      out.push_back(std::move(r));
      continue;
    }
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  if (static_cast<int>(out.size()) < count) {
    ADD_FAILURE() << "got " << out.size() << " of " << count
                  << " responses; rest: " << all;
  }
  return out;
}

HttpResponse HttpRaw(int port, const std::string& raw, bool head_only = false) {
  auto all = HttpRawN(port, raw, 1, head_only);
  return all.empty() ? HttpResponse{} : all.front();
}

HttpResponse HttpGet(int port, const std::string& path = "/metrics") {
  return HttpRaw(port, absl::StrCat("GET ", path,
                                    " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    "Accept: text/plain\r\n\r\n"));
}

// ---- Exposition parsing
// -------------------------------------------------------

struct Exposition {
  std::map<std::string, std::string> type;  // family -> counter|gauge|...
  std::map<std::string, std::string> help;  // family -> help text
  std::map<std::string, double> samples;    // `name{labels}` -> value
};

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (absl::StartsWith(line, "# TYPE ") ||
        absl::StartsWith(line, "# HELP ")) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      auto& map = line[2] == 'T' ? e.type : e.help;
      map[rest.substr(0, sp)] =
          sp == std::string::npos ? "" : rest.substr(sp + 1);
      continue;
    }
    if (line[0] == '#') continue;
    const size_t close = line.find('}');
    const size_t sp = line.find(' ', close == std::string::npos ? 0 : close);
    if (sp == std::string::npos) {
      ADD_FAILURE() << "bad sample line: " << line;
      continue;
    }
    e.samples[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return e;
}

// The value of sample `key`; NaN (and a failure) when absent.
double Value(const Exposition& e, const std::string& key) {
  auto it = e.samples.find(key);
  if (it == e.samples.end()) {
    ADD_FAILURE() << "no sample " << key;
    return std::nan("");
  }
  return it->second;
}

std::map<std::string, std::string> ExpectedFamilies() {
  return {
      {"clusterkv_requests_total", "counter"},
      {"clusterkv_admission_rejections_total", "counter"},
      {"clusterkv_prompt_tokens_total", "counter"},
      {"clusterkv_generated_tokens_total", "counter"},
      {"clusterkv_cache_lookups_total", "counter"},
      {"clusterkv_cache_hits_total", "counter"},
      {"clusterkv_host_to_device_bytes_total", "counter"},
      {"clusterkv_prefix_cache_hits_total", "counter"},
      {"clusterkv_prefix_cache_misses_total", "counter"},
      {"clusterkv_prefix_cache_reused_tokens_total", "counter"},
      {"clusterkv_time_to_first_token_seconds", "histogram"},
      {"clusterkv_inter_token_latency_seconds", "histogram"},
      {"clusterkv_prefill_duration_seconds", "histogram"},
      {"clusterkv_clustering_duration_seconds", "histogram"},
      {"clusterkv_selection_duration_seconds", "histogram"},
      {"clusterkv_batch_size", "histogram"},
      {"clusterkv_attention_recall", "histogram"},
      {"clusterkv_sessions_active", "gauge"},
      {"clusterkv_queue_depth", "gauge"},
      {"clusterkv_kv_bytes", "gauge"},
      {"clusterkv_kv_resident_segment_bytes", "gauge"},
      {"clusterkv_kv_resident_evictions_total", "counter"},
      {"clusterkv_kv_resident_refusals_total", "counter"},
      {"clusterkv_kv_streamed_bytes_total", "counter"},
  };
}

// ---- Shared HTTP instance (one per binary; docs/building.md, pitfall 5) ----

absl::StatusOr<std::unique_ptr<http::MetricsEndpoint>> StartEndpoint(
    const std::string& address, const ServerMetrics& m) {
  return http::MetricsEndpoint::Start(address, HttpConfig{},
                                      [&m] { return m.Serialize(); });
}

struct Shared {
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<http::MetricsEndpoint> endpoint;
  int port = -1;
};

Shared& SharedMetrics() {
  static Shared* shared = [] {
    auto* s = new Shared;
    s->metrics = ServerMetrics::Create();
    auto endpoint = StartEndpoint("127.0.0.1:0", *s->metrics);
    if (endpoint.ok()) {
      s->endpoint = *std::move(endpoint);
      s->port = s->endpoint->port();
    }
    return s;
  }();
  if (shared->endpoint == nullptr) {
    ADD_FAILURE() << "could not start the shared metrics server";
  }
  return *shared;
}

// Feeds every metric once.
void TouchAll(ServerMetrics& m) {
  m.RequestDone("Prefill", "OK");
  m.AdmissionRejected("sessions");
  m.AddPromptTokens(3);
  m.AddGeneratedTokens(2);
  m.ObserveTimeToFirstToken(0.2);
  m.ObserveInterTokenLatency(0.02);
  m.ObservePrefill(0.15);
  m.ObserveClustering(0.05);
  m.ObserveSelection(0.0003);
  m.ObserveBatchSize(4);
  m.ObserveRecall("clusterkv", 0.9, 0.95);
  m.SetActiveSessions(1);
  m.SetQueueDepth(0);
  m.SetKvBytes("host", 1024);
  m.AddCacheLookups(10, 7);
  m.AddHostToDeviceBytes(4096);
}

// ---- ServerMetrics without HTTP
// ----------------------------------------------------

TEST(ServerMetricsTest, EveryFamilyHasHelpAndType) {
  auto m = ServerMetrics::Create();
  TouchAll(*m);
  const Exposition e = Parse(m->Serialize());
  for (const auto& [name, type] : ExpectedFamilies()) {
    EXPECT_EQ(e.type.count(name) ? e.type.at(name) : "<missing>", type) << name;
    EXPECT_FALSE(e.help.count(name) == 0 || e.help.at(name).empty()) << name;
  }
  EXPECT_EQ(e.type.size(), ExpectedFamilies().size());
}

TEST(ServerMetricsTest, ValuesAndLabels) {
  auto created = ServerMetrics::Create();
  ServerMetrics& m = *created;
  m.RequestDone("Prefill", "OK");
  m.RequestDone("Prefill", "OK");
  m.RequestDone("Decode", "RESOURCE_EXHAUSTED");
  m.AdmissionRejected("kv_bytes");
  m.AddPromptTokens(100);
  m.AddPromptTokens(-5);  // ignored
  m.AddGeneratedTokens(7);
  m.ObserveTimeToFirstToken(0.004);
  m.ObserveTimeToFirstToken(2.0);
  m.ObserveTimeToFirstToken(-1.0);          // dropped
  m.ObserveTimeToFirstToken(std::nan(""));  // dropped
  m.ObserveInterTokenLatency(0.0002);
  m.ObservePrefill(1.5);
  m.ObserveClustering(0.3);
  m.ObserveSelection(0.0004);
  m.ObserveBatchSize(1);
  m.ObserveBatchSize(64);
  m.ObserveBatchSize(100);
  m.ObserveRecall("clusterkv", 0.97, 0.5);
  m.ObserveRecall("clusterkv", 1.2, std::nan(""));   // clamped to 1; dropped
  m.ObserveRecall("clusterkv", std::nan(""), -0.5);  // dropped; clamped to 0
  m.AddRecallSeries("quest");                        // at count 0
  m.SetActiveSessions(3);
  m.SetQueueDepth(5);
  m.SetResidentSegmentBytes(4096);
  m.AddResidencyChanges(3, 0);
  m.AddResidencyChanges(2, 7);
  m.AddStreamedBytes(1000);
  m.AddStreamedBytes(24);
  m.SetKvBytes("device", int64_t{3} << 30);
  m.AddCacheLookups(10, 4);
  m.AddCacheLookups(6, 6);
  m.AddHostToDeviceBytes(1 << 20);

  const Exposition e = Parse(m.Serialize());
  EXPECT_EQ(Value(e, R"(clusterkv_requests_total{code="OK",rpc="Prefill"})"),
            2);
  EXPECT_EQ(
      Value(
          e,
          R"(clusterkv_requests_total{code="RESOURCE_EXHAUSTED",rpc="Decode"})"),
      1);
  EXPECT_EQ(
      Value(e, R"(clusterkv_admission_rejections_total{limit="kv_bytes"})"), 1);
  EXPECT_EQ(Value(e, "clusterkv_prompt_tokens_total"), 100);
  EXPECT_EQ(Value(e, "clusterkv_generated_tokens_total"), 7);

  EXPECT_EQ(Value(e, "clusterkv_time_to_first_token_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(Value(e, "clusterkv_time_to_first_token_seconds_sum"),
                   2.004);
  EXPECT_EQ(
      Value(e, R"(clusterkv_time_to_first_token_seconds_bucket{le="0.001"})"),
      0);
  EXPECT_EQ(
      Value(e, R"(clusterkv_time_to_first_token_seconds_bucket{le="0.005"})"),
      1);
  EXPECT_EQ(
      Value(e, R"(clusterkv_time_to_first_token_seconds_bucket{le="60"})"), 2);
  EXPECT_EQ(
      Value(e, R"(clusterkv_time_to_first_token_seconds_bucket{le="+Inf"})"),
      2);
  EXPECT_EQ(
      Value(e, R"(clusterkv_inter_token_latency_seconds_bucket{le="0.00025"})"),
      1);
  EXPECT_EQ(Value(e, "clusterkv_prefill_duration_seconds_count"), 1);
  EXPECT_EQ(Value(e, "clusterkv_clustering_duration_seconds_count"), 1);
  EXPECT_EQ(
      Value(e, R"(clusterkv_selection_duration_seconds_bucket{le="0.0005"})"),
      1);

  EXPECT_EQ(Value(e, R"(clusterkv_batch_size_bucket{le="1"})"), 1);
  EXPECT_EQ(Value(e, R"(clusterkv_batch_size_bucket{le="64"})"), 2);
  EXPECT_EQ(Value(e, R"(clusterkv_batch_size_bucket{le="+Inf"})"), 3);
  EXPECT_EQ(Value(e, "clusterkv_batch_size_sum"), 165);

  // Labels in name order; a histogram's `le` last.
  const auto recall = [](const char* part, const std::string& labels) {
    return absl::StrCat("clusterkv_attention_recall_", part, "{", labels, "}");
  };
  const std::string topk = R"(measure="topk",policy="clusterkv")";
  const std::string mass = R"(measure="mass",policy="clusterkv")";
  EXPECT_EQ(Value(e, recall("count", topk)), 2);
  EXPECT_EQ(Value(e, recall("bucket", topk + R"(,le="0.95")")), 0);
  EXPECT_EQ(Value(e, recall("bucket", topk + R"(,le="0.99")")), 1);
  EXPECT_EQ(Value(e, recall("bucket", topk + R"(,le="1")")), 2);
  EXPECT_EQ(Value(e, recall("count", mass)), 2);
  EXPECT_EQ(Value(e, recall("sum", mass)), 0.5);
  EXPECT_EQ(Value(e, recall("bucket", mass + R"(,le="0.1")")), 1);
  EXPECT_EQ(Value(e, recall("count", R"(measure="topk",policy="quest")")), 0);
  EXPECT_EQ(Value(e, recall("count", R"(measure="mass",policy="quest")")), 0);

  EXPECT_EQ(Value(e, "clusterkv_sessions_active"), 3);
  EXPECT_EQ(Value(e, "clusterkv_queue_depth"), 5);
  EXPECT_EQ(Value(e, R"(clusterkv_kv_bytes{tier="device"})"),
            static_cast<double>(int64_t{3} << 30));
  EXPECT_EQ(Value(e, R"(clusterkv_kv_bytes{tier="host"})"), 0);
  EXPECT_EQ(Value(e, "clusterkv_kv_resident_segment_bytes"), 4096);
  EXPECT_EQ(Value(e, "clusterkv_kv_resident_evictions_total"), 5);
  EXPECT_EQ(Value(e, "clusterkv_kv_resident_refusals_total"), 7);
  EXPECT_EQ(Value(e, "clusterkv_kv_streamed_bytes_total"), 1024);
  EXPECT_EQ(Value(e, "clusterkv_cache_lookups_total"), 16);
  EXPECT_EQ(Value(e, "clusterkv_cache_hits_total"), 10);
  EXPECT_EQ(Value(e, "clusterkv_host_to_device_bytes_total"), 1 << 20);
}

// Totals() (the status page's numbers) reads the same objects as the text.
TEST(ServerMetricsTest, TotalsAreTheExposedNumbers) {
  auto created = ServerMetrics::Create();
  ServerMetrics& m = *created;
  m.RequestDone("Prefill", "OK");
  m.RequestDone("http.Completions", "OK");
  m.RequestDone("Decode", "RESOURCE_EXHAUSTED");
  m.AdmissionRejected("max_sessions");
  m.AdmissionRejected("max_sessions");
  m.AdmissionRejected("max_prompt_tokens");
  m.AddPromptTokens(100);
  m.AddGeneratedTokens(7);
  m.ObserveTimeToFirstToken(0.5);
  m.ObserveTimeToFirstToken(1.5);
  m.ObserveRecall("quest", 0.5, 0.25);
  m.ObserveRecall("quest", 1.0, std::nan(""));  // mass dropped
  m.AddRecallSeries("full");
  m.AddCacheLookups(10, 4);
  const MetricsTotals t = m.Totals();
  const Exposition e = Parse(m.Serialize());
  EXPECT_EQ(t.prompt_tokens, Value(e, "clusterkv_prompt_tokens_total"));
  EXPECT_EQ(t.prompt_tokens, 100);
  EXPECT_EQ(t.generated_tokens, 7);
  EXPECT_EQ(t.ttft_count, 2);
  EXPECT_DOUBLE_EQ(t.ttft_sum_seconds, 2.0);
  EXPECT_EQ(t.cache_lookups, 10);
  EXPECT_EQ(t.cache_hits, 4);
  EXPECT_EQ(t.requests_by_code, (std::map<std::string, int64_t>{
                                    {"OK", 2}, {"RESOURCE_EXHAUSTED", 1}}));
  EXPECT_EQ(t.admission_rejections,
            (std::map<std::string, int64_t>{{"max_prompt_tokens", 1},
                                            {"max_sessions", 2}}));
  ASSERT_EQ(t.recall.size(), 2u);
  const MetricsTotals::Recall& q = t.recall.at("quest");
  EXPECT_EQ(q.topk_count, 2);
  EXPECT_DOUBLE_EQ(q.topk_sum, 1.5);
  EXPECT_EQ(q.mass_count, 1);
  EXPECT_DOUBLE_EQ(q.mass_sum, 0.25);
  EXPECT_EQ(t.recall.at("full").topk_count, 0);
}

TEST(ServerMetricsTest, LabelValuesAreEscaped) {
  auto m = ServerMetrics::Create();
  m->RequestDone("We\"ird\\rpc", "OK");
  EXPECT_TRUE(absl::StrContains(
      m->Serialize(),
      R"(clusterkv_requests_total{code="OK",rpc="We\"ird\\rpc"} 1)"));
}

TEST(MetricsEndpointTest, BadAddressesAreInvalidArgument) {
  auto m = ServerMetrics::Create();
  for (const char* address :
       {"no-port", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:80x", "::1:9090",
        "[::1:9090", "127.0.0.1:-1"}) {
    auto e = StartEndpoint(address, *m);
    EXPECT_TRUE(absl::IsInvalidArgument(e.status()))
        << address << ": " << e.status();
    EXPECT_TRUE(absl::StrContains(e.status().message(), "--metrics-address"))
        << e.status();
  }
}

TEST(MetricsEndpointTest, UnresolvableHostIsUnavailable) {
  auto m = ServerMetrics::Create();
  auto e = StartEndpoint("no-such-host.invalid:0", *m);
  EXPECT_TRUE(absl::IsUnavailable(e.status())) << e.status();
  EXPECT_TRUE(absl::StrContains(e.status().message(),
                                "no-such-host.invalid:0 (--metrics-address)"))
      << e.status();
}

// Host names resolve ("localhost" is 127.0.0.1; another name through the
// system resolver, whose loopback entry every Debian has as "localhost" and
// "ip6-localhost"), brackets take IPv6 literals, and an empty host is every
// IPv4 interface.
TEST(MetricsEndpointTest, NamesLiteralsAndAllInterfaces) {
  auto m = ServerMetrics::Create();
  for (const char* host : {"localhost", "127.0.0.1", ""}) {
    auto e = StartEndpoint(absl::StrCat(host, ":0"), *m);
    ASSERT_TRUE(e.ok()) << host << ": " << e.status();
    EXPECT_EQ(HttpGet((*e)->port()).status, 200) << host;
  }
  // Through the resolver: a name of a loopback line of /etc/hosts other
  // than "localhost" (Debian writes "127.0.1.1 HOSTNAME"; gVisor and
  // Docker add the host's name too).
  std::ifstream hosts("/etc/hosts");
  std::string line, name, ip;
  while (name.empty() && std::getline(hosts, line)) {
    std::istringstream fields(line);
    fields >> ip;
    if (!absl::StartsWith(ip, "127.")) continue;
    std::string n;
    while (name.empty() && fields >> n && n[0] != '#') {
      if (n != "localhost") name = n;
    }
  }
  ASSERT_FALSE(name.empty()) << "no loopback name in /etc/hosts";
  auto e = StartEndpoint(absl::StrCat(name, ":0"), *m);
  ASSERT_TRUE(e.ok()) << name << ": " << e.status();
  sockaddr_in a = Loopback((*e)->port());
  ASSERT_EQ(inet_pton(AF_INET, ip.c_str(), &a.sin_addr), 1) << ip;
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0)
      << name << " = " << ip;
}

// ---- HTTP
// ---------------------------------------------------------------------------

TEST(MetricsHttpTest, ScrapeMatchesSerialize) {
#if CLUSTERKV_TEST_CUDA_TLS
  // Without a driver this fails (error 35): the point is that the CUDA
  // runtime and cuBLASLt are loaded, with their static TLS, in every thread.
  int devices = -1;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  std::printf("cudaGetDeviceCount: %s; cuBLASLt version %zu\n",
              cudaGetErrorName(err), cublasLtGetVersion());
#endif
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  TouchAll(*s.metrics);
  const HttpResponse r = HttpGet(s.port);
  ASSERT_EQ(r.status, 200) << r.head;
  EXPECT_TRUE(absl::StrContains(
      r.head, "Content-Type: text/plain; version=0.0.4; charset=utf-8"))
      << r.head;
  EXPECT_TRUE(absl::StrContains(
      r.head, absl::StrCat("Content-Length: ", r.body.size())))
      << r.head;
  const Exposition scraped = Parse(r.body);
  const Exposition direct = Parse(s.metrics->Serialize());
  EXPECT_EQ(scraped.type, direct.type);
  EXPECT_EQ(scraped.help, direct.help);
  for (const auto& [name, type] : ExpectedFamilies()) {
    EXPECT_EQ(scraped.type.count(name), 1u) << name;
  }
  // Nothing moved in between: the samples agree too.
  EXPECT_EQ(scraped.samples, direct.samples);
}

TEST(MetricsHttpTest, CountersMoveBetweenScrapes) {
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  s.metrics->RequestDone("Decode", "OK");
  const std::string decode_ok =
      R"(clusterkv_requests_total{code="OK",rpc="Decode"})";
  const Exposition before = Parse(HttpGet(s.port).body);
  s.metrics->AddGeneratedTokens(11);
  s.metrics->RequestDone("Decode", "OK");
  s.metrics->ObserveInterTokenLatency(0.03);
  s.metrics->SetQueueDepth(9);
  const Exposition after = Parse(HttpGet(s.port).body);
  EXPECT_EQ(Value(after, "clusterkv_generated_tokens_total") -
                Value(before, "clusterkv_generated_tokens_total"),
            11);
  EXPECT_EQ(Value(after, decode_ok) - Value(before, decode_ok), 1);
  EXPECT_EQ(Value(after, "clusterkv_inter_token_latency_seconds_count") -
                Value(before, "clusterkv_inter_token_latency_seconds_count"),
            1);
  EXPECT_EQ(Value(after, "clusterkv_queue_depth"), 9);
}

TEST(MetricsHttpTest, OtherRequests) {
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  const HttpResponse query = HttpGet(s.port, "/metrics?name[]=x");
  EXPECT_EQ(query.status, 200);
  EXPECT_TRUE(absl::StrContains(query.body, "clusterkv_kv_bytes"));

  EXPECT_EQ(HttpGet(s.port, "/").status, 200);
  EXPECT_EQ(HttpGet(s.port, "/nope").status, 404);

  const HttpResponse head =
      HttpRaw(s.port, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true);
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  EXPECT_TRUE(absl::StrContains(head.head, "version=0.0.4")) << head.head;

  const HttpResponse post = HttpRaw(
      s.port,
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(post.status, 405);
  EXPECT_TRUE(absl::StrContains(post.head, "Allow: GET, HEAD"));

  EXPECT_EQ(HttpRaw(s.port, "garbage\r\n\r\n").status, 400);
  EXPECT_EQ(HttpRaw(s.port, absl::StrCat("GET /", std::string(20000, 'a'),
                                         " HTTP/1.1\r\n\r\n"))
                .status,
            414);

  // A scraper's keep-alive connection, three requests in one write:
  // answered in order on the one connection.
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto three =
      HttpRawN(s.port, get + "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" + get, 3);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].status, 200);
  EXPECT_EQ(three[1].status, 404);
  EXPECT_EQ(three[2].status, 200);
  EXPECT_TRUE(absl::StrContains(three[2].body, "clusterkv_kv_bytes"));

  // The server survives a client that connects and leaves at once.
  close(Connect(s.port));
  EXPECT_EQ(HttpGet(s.port).status, 200);
}

TEST(MetricsHttpTest, PortInUseIsUnavailable) {
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", s.port);
  auto e = StartEndpoint(address, *s.metrics);
  ASSERT_TRUE(absl::IsUnavailable(e.status())) << e.status();
  EXPECT_TRUE(absl::StrContains(e.status().message(), address)) << e.status();
  // The shared server is unaffected.
  EXPECT_EQ(HttpGet(s.port).status, 200);
}

TEST(MetricsHttpTest, ConcurrentUpdatesAndScrapes) {
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      while (!stop.load()) {
        s.metrics->RequestDone(absl::StrCat("Rpc", t), "OK");
        s.metrics->ObserveBatchSize(t + 1);
        s.metrics->SetKvBytes("host", t);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    const HttpResponse r = HttpGet(s.port);
    ASSERT_EQ(r.status, 200);
    ASSERT_EQ(Parse(r.body).type.size(), ExpectedFamilies().size());
  }
  stop = true;
  for (auto& w : writers) w.join();
}

// Create, scrape and destroy on one port several times: stop is quick and
// the port (left in TIME_WAIT by the scrapes) can be bound again at once.
TEST(MetricsHttpTest, RestartOnSamePort) {
  const int port = FreePort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto m = ServerMetrics::Create();
    auto endpoint = StartEndpoint(address, *m);
    ASSERT_TRUE(endpoint.ok()) << "round " << i << ": " << endpoint.status();
    m->AddPromptTokens(i + 1);
    const Exposition e = Parse(HttpGet(port).body);
    EXPECT_EQ(Value(e, "clusterkv_prompt_tokens_total"), i + 1);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// The I/O thread renders with a stack far above the static TLS of the
// libraries this binary links (docs/building.md, pitfall 1: civetweb's
// 100 KiB broke; CUDA runtime + cuBLASLt + OpenBLAS take ~250 KiB).
TEST(MetricsEndpointTest, EphemeralPortAndLargeStack) {
  constexpr size_t kMinStackBytes = size_t{2} << 20;
  std::atomic<size_t> stack_bytes{0};
  auto endpoint =
      http::MetricsEndpoint::Start("127.0.0.1:0", HttpConfig{}, [&] {
        pthread_attr_t attr;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
          pthread_attr_getstacksize(&attr, &size);
          pthread_attr_destroy(&attr);
        }
        stack_bytes = size;
        return std::string("x 1\n");
      });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  ASSERT_GT((*endpoint)->port(), 0);
  const HttpResponse r = HttpGet((*endpoint)->port());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "x 1\n");
  EXPECT_GE(stack_bytes.load(), kMinStackBytes);
}

TEST(MetricsEndpointTest, RenderFailureIs500) {
  auto endpoint = http::MetricsEndpoint::Start(
      "127.0.0.1:0", HttpConfig{},
      []() -> std::string { throw std::runtime_error("boom"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const HttpResponse r = HttpGet((*endpoint)->port());
  EXPECT_EQ(r.status, 500);
  EXPECT_TRUE(absl::StrContains(r.body, "boom"));
  // The endpoint still serves.
  EXPECT_EQ(HttpGet((*endpoint)->port(), "/").status, 200);
}

// Clients that connect and send nothing, or hold a keep-alive connection,
// neither block other scrapes nor delay shutdown.
TEST(MetricsEndpointTest, IdleClientsDoNotBlockScrapesOrStop) {
  auto endpoint = http::MetricsEndpoint::Start(
      "127.0.0.1:0", HttpConfig{}, [] { return std::string("x 1\n"); });
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  std::vector<std::unique_ptr<Fd>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<Fd>(Connect(port)));
    ASSERT_GE(idle.back()->get(), 0);
  }
  // A slow client: half a request line.
  ASSERT_GT(send(idle[0]->get(), "GET /met", 8, MSG_NOSIGNAL), 0);
  EXPECT_EQ(HttpGet(port).body, "x 1\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  endpoint->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(500));
}

// ---- promtool
// -------------------------------------------------------------------------

TEST(MetricsHttpTest, PromtoolAcceptsScrape) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package `prometheus`)";
  }
  Shared& s = SharedMetrics();
  ASSERT_NE(s.metrics, nullptr);
  TouchAll(*s.metrics);
  s.metrics->RequestDone("Label \"with\" quotes", "OK");
  const HttpResponse r = HttpGet(s.port);
  ASSERT_EQ(r.status, 200);
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/metrics_test_scrape_", getpid(), ".txt");
  std::ofstream(path) << r.body;
  const std::string cmd =
      absl::StrCat("promtool check metrics < '", path, "' 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
  const int rc = pclose(pipe);
  std::remove(path.c_str());
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << output;
  EXPECT_EQ(output, "") << "promtool lint findings";
}

}  // namespace
}  // namespace ckv::server
