#include "server/http/http_server.h"

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "httplib.h"
#include "server/auth.h"
#include "server/http/openai_frontend.h"
#include "server/http/openai_json.h"
#include "server/http/status_json.h"
#include "server/request_log.h"
#include "server/session_manager.h"
#include "server/status.h"
#include "server/status_util.h"
#include "server/transport_security.h"

namespace ckv::server::http {
namespace {

constexpr char kJson[] = "application/json";
constexpr size_t kMaxBodyBytes = size_t{64} << 20;
// How long a streaming response waits for text before it checks the client.
constexpr absl::Duration kStreamPoll = absl::Milliseconds(200);
// The status page's history: one sample per period.
constexpr absl::Duration kStatusPeriod = absl::Seconds(1);
// Sessions listed by GET /v1/status (the most recently used).
constexpr int kStatusMaxListed = 100;
// GET /: the page may run its inline script and style and fetch from this
// origin only; nothing else loads, nothing embeds it.
constexpr char kPagePolicy[] =
    "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  HostPort hp;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen must be HOST:PORT, got '", address, "'"));
  }
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  return hp;
}

void SendError(httplib::Response& res, const absl::Status& s) {
  res.status = HttpStatusOf(s.code());
  res.set_content(ErrorBody(s), kJson);
}

std::string FinishReasonText(FinishReason r) {
  return r == FinishReason::kLength ? "length" : "stop";
}

std::string NewResponseId(Endpoint e) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%s-%016x%08x",
                         e == Endpoint::kChat ? "chatcmpl" : "cmpl", rng(),
                         static_cast<uint32_t>(rng()));
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class HttpApi final : public FrontDoor {
 public:
  explicit HttpApi(ClusterKvServer& server)
      : frontend_(server.state()), tokens_(server.state().tokens()) {}
  ~HttpApi() override { Stop(); }

  absl::StatusOr<int> Listen(const ServerConfig& config);
  void Stop() override;

 private:
  void Route();
  // The caller's tenant (server/service_auth.h's rules on the
  // Authorization header); false after answering 401.
  bool Authenticate(const httplib::Request& req, httplib::Response& res,
                    std::string* tenant) const;
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleStatus(const httplib::Request& req, httplib::Response& res);
  void SampleStatus();  // the sampler thread
  void HandleGeneration(Endpoint endpoint, const httplib::Request& req,
                        httplib::Response& res);
  void Stream(std::shared_ptr<GenerationJob> job, const ResponseHead& head,
              bool include_usage, httplib::Response& res);

  OpenAiFrontend frontend_;
  const TokenStore* tokens_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  StatusHistory history_;
  absl::Notification stop_sampling_;
  std::thread sampler_;
  std::atomic<bool> stopped_{false};
};

absl::StatusOr<int> HttpApi::Listen(const ServerConfig& config) {
  auto hp = ParseHostPort(config.http_listen_address);
  if (!hp.ok()) return hp.status();
  if (!config.tls.enabled() && !config.insecure &&
      !IsLoopbackAddress(config.http_listen_address)) {
    return absl::InvalidArgumentError(
        "--http-listen on a non-loopback address needs TLS (--tls-cert, "
        "--tls-key) or --insecure");
  }
  if (config.tls.enabled()) {
    const char* ca = config.tls.client_ca_file.empty()
                         ? nullptr
                         : config.tls.client_ca_file.c_str();
    server_ = std::make_unique<httplib::SSLServer>(
        config.tls.cert_file.c_str(), config.tls.key_file.c_str(), ca);
    if (!server_->is_valid()) {
      return absl::UnavailableError(
          "--http-listen: cannot load --tls-cert/--tls-key/--tls-client-ca "
          "for HTTPS");
    }
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  server_->set_payload_max_length(kMaxBodyBytes);
  // Idle keep-alive connections hold a pool thread; Stop waits this long.
  server_->set_keep_alive_timeout(2);
  Route();
  const int port =
      hp->port == 0
          ? server_->bind_to_any_port(hp->host)
          : (server_->bind_to_port(hp->host, hp->port) ? hp->port : -1);
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", config.http_listen_address, "' (--http-listen)"));
  }
  sampler_ = std::thread([this] { SampleStatus(); });
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  LogInfo(absl::StrCat("http listening on ", hp->host, ":", port,
                       config.tls.enabled() ? " (HTTPS)" : " (plain HTTP)",
                       "; OpenAI-compatible API under /v1, status page at /"));
  return port;
}

void HttpApi::Stop() {
  if (stopped_.exchange(true)) return;
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
  stop_sampling_.Notify();
  if (sampler_.joinable()) sampler_.join();
}

void HttpApi::SampleStatus() {
  do {
    auto counters = ReadStatusCounters(frontend_.state());
    if (counters.ok()) history_.Record(*counters);
  } while (!stop_sampling_.WaitForNotificationWithTimeout(kStatusPeriod));
}

void HttpApi::Route() {
  // The page holds no data: it is public, and the data it fetches from
  // /v1/status needs the token like every /v1 route.
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", kPagePolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Cache-Control", "no-cache");
    const absl::string_view page = StatusPageHtml();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  server_->Get("/v1/status",
               [this](const httplib::Request& req, httplib::Response& res) {
                 HandleStatus(req, res);
               });
  server_->Get("/v1/models",
               [this](const httplib::Request& req, httplib::Response& res) {
                 HandleModels(req, res);
               });
  server_->Post("/v1/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleGeneration(Endpoint::kCompletions, req, res);
                });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleGeneration(Endpoint::kChat, req, res);
                });
  // Unknown paths, 413 (body too large), ...: an OpenAI error body.
  server_->set_error_handler(
      [](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        absl::Status s = res.status == 404
                             ? absl::NotFoundError(absl::StrCat(
                                   "no route for ", req.method, " ", req.path))
                             : absl::InvalidArgumentError(absl::StrCat(
                                   "HTTP ", res.status, " on ", req.path));
        const int status = res.status;
        res.set_content(ErrorBody(s), kJson);
        res.status = status;
      });
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        SendError(res, absl::InternalError("internal error"));
      });
}

bool HttpApi::Authenticate(const httplib::Request& req, httplib::Response& res,
                           std::string* tenant) const {
  if (tokens_ == nullptr) {
    *tenant = std::string(kAnonymousTenant);
    return true;
  }
  absl::Status error;
  // BearerToken returns a view into `header`, which must outlive it.
  const std::string header = req.get_header_value("Authorization");
  const auto token = BearerToken(header);
  if (!req.has_header("Authorization")) {
    error = absl::UnauthenticatedError(
        "missing credentials: send 'Authorization: Bearer TOKEN'");
  } else if (!token.has_value()) {
    error = absl::UnauthenticatedError(
        "malformed Authorization header: expected 'Bearer TOKEN'");
  } else if (auto t = tokens_->TenantOf(*token); !t.has_value()) {
    error = absl::UnauthenticatedError("unknown bearer token");
  } else {
    *tenant = *std::move(t);
    return true;
  }
  SendError(res, error);
  res.set_header("WWW-Authenticate", "Bearer");
  return false;
}

void HttpApi::HandleModels(const httplib::Request& req,
                           httplib::Response& res) {
  std::string tenant;
  if (!Authenticate(req, res, &tenant)) return;
  if (auto b = frontend_.state().Backend(); !b.ok()) {
    SendError(res, b.status());
    return;
  }
  res.set_content(ModelsBody(frontend_.model_id(), NowUnixSeconds()), kJson);
}

// Server-wide numbers for every authenticated caller; the session list
// holds the caller's tenant's sessions only.
void HttpApi::HandleStatus(const httplib::Request& req,
                           httplib::Response& res) {
  std::string tenant;
  if (!Authenticate(req, res, &tenant)) return;
  auto status =
      CollectStatus(frontend_.state(), tenant, kStatusMaxListed, &history_);
  if (!status.ok()) {
    SendError(res, status.status());
    return;
  }
  res.set_header("Cache-Control", "no-store");
  res.set_content(StatusJson(*status), kJson);
}

void HttpApi::HandleGeneration(Endpoint endpoint, const httplib::Request& req,
                               httplib::Response& res) {
  RequestRecord rec;  // requests refused before a job runs
  rec.rpc =
      endpoint == Endpoint::kChat ? "http.ChatCompletions" : "http.Completions";
  auto refuse = [&](const absl::Status& s) {
    LogRequest(frontend_.state().metrics(), rec, ToGrpcStatus(s));
    SendError(res, s);
  };
  std::string tenant;
  if (!Authenticate(req, res, &tenant)) {
    LogRequest(frontend_.state().metrics(), rec,
               grpc::Status(grpc::StatusCode::UNAUTHENTICATED, ""));
    return;
  }
  rec.tenant = tenant;
  auto request = ParseOpenAiRequest(req.body, endpoint);
  if (!request.ok()) return refuse(request.status());
  SessionChoice choice;
  choice.session_id = req.get_header_value("x-session-id");
  choice.fork = req.get_header_value("x-session-fork") == "1";
  if (ValidateSessionId(choice.session_id).ok()) {
    rec.session_id = choice.session_id;  // never unvalidated text in logs
  }
  auto started = frontend_.Start(tenant, choice, *request);
  if (!started.ok()) return refuse(started.status());
  if (!started->session_id.empty()) {
    res.set_header("x-session-id", started->session_id);
  }
  ResponseHead head{endpoint, NewResponseId(endpoint), NowUnixSeconds(),
                    frontend_.model_id()};
  if (request->stream) {
    Stream(started->job, head, request->include_usage, res);
    return;
  }
  const JobResult& r = started->job->Wait();
  if (!r.status.ok()) {
    SendError(res, r.status);
    return;
  }
  res.set_header("x-session-tokens", absl::StrCat(r.session_tokens));
  res.set_content(CompletionBody(head, r.text, FinishReasonText(r.finish),
                                 {r.input_tokens, r.generated_tokens}),
                  kJson);
}

// Server-sent events: one chunk per batch of text, a last chunk with the
// finish reason (or an error event), the usage chunk when asked, [DONE].
void HttpApi::Stream(std::shared_ptr<GenerationJob> job,
                     const ResponseHead& head, bool include_usage,
                     httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer
  auto provider = [job, head, include_usage, first = true](
                      size_t, httplib::DataSink& sink) mutable {
    std::string text;
    const bool done = job->Next(&text, kStreamPoll);
    auto send = [&sink](const std::string& event) {
      return sink.write(event.data(), event.size());
    };
    if (!text.empty()) {
      if (!send(SseEvent(ChunkBody(head, text, first)))) return false;
      first = false;
    }
    if (!done) return sink.is_writable();
    const JobResult& r = job->Wait();
    if (!r.status.ok()) {
      if (!send(SseEvent(ErrorBody(r.status)))) return false;
    } else {
      if (!send(SseEvent(
              ChunkBody(head, "", first, FinishReasonText(r.finish))))) {
        return false;
      }
      if (include_usage && !send(SseEvent(UsageChunkBody(
                               head, {r.input_tokens, r.generated_tokens})))) {
        return false;
      }
    }
    if (!send(kSseDone)) return false;
    sink.done();
    return true;
  };
  // Not completed (client gone, server stopping): the job is cancelled.
  res.set_chunked_content_provider("text/event-stream", std::move(provider),
                                   [job](bool success) {
                                     if (!success) job->Cancel();
                                   });
}

}  // namespace

absl::StatusOr<int> StartHttpApi(ClusterKvServer& server) {
  if (server.config().http_listen_address.empty()) return 0;
  auto api = std::make_unique<HttpApi>(server);
  auto port = api->Listen(server.config());
  if (!port.ok()) return port.status();
  server.AddFrontDoor(std::move(api));
  return port;
}

}  // namespace ckv::server::http
