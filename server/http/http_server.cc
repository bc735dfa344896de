#include "server/http/http_server.h"

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include "server/auth.h"
#include "server/http/choice_stream.h"
#include "server/http/http_transport.h"
#include "server/http/listen_address.h"
#include "server/http/openai_frontend.h"
#include "server/http/openai_json.h"
#include "server/http/openai_tools.h"
#include "server/http/status_json.h"
#include "server/request_log.h"
#include "server/session_manager.h"
#include "server/status.h"
#include "server/status_util.h"
#include "server/transport_security.h"

namespace ckv::server::http {
namespace {

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

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse ErrorResponse(const absl::Status& s) {
  HttpResponse r = JsonResponse(HttpStatusOf(s.code()), ErrorBody(s));
  if (auto after = RetryAfterSeconds(s)) {
    r.headers.emplace_back("Retry-After", absl::StrCat(*after));
  }
  return r;
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

using Headers = std::vector<std::pair<std::string, std::string>>;

// Replies to `ex` with the answer of `jobs` (the choices, index order):
// server-sent events, or the whole body once they end.
void Answer(const std::shared_ptr<HttpExchange>& ex, ChoiceJobs jobs,
            const AnswerSpec& spec, Headers headers, bool stream);

class HttpApi final : public FrontDoor {
 public:
  explicit HttpApi(ClusterKvServer& server)
      : frontend_(server.state()), tokens_(server.state().tokens()) {}
  ~HttpApi() override { Stop(); }

  absl::StatusOr<int> Listen(const ServerConfig& config);
  void Stop() override;

 private:
  // I/O thread: routes; anything that may take time goes to the blocking
  // pool.
  void Handle(std::shared_ptr<HttpExchange> ex);
  void Offload(std::shared_ptr<HttpExchange> ex,
               void (HttpApi::*handler)(HttpExchange&));
  // The caller's tenant (server/service_auth.h's rules on the
  // Authorization header); the 401 answer otherwise.
  absl::StatusOr<std::string> Authenticate(const HttpRequest& req) const;
  void HandleModels(HttpExchange& ex);
  void HandleModel(HttpExchange& ex);
  void HandleStatus(HttpExchange& ex);
  void HandleCompletions(HttpExchange& ex) {
    HandleGeneration(Endpoint::kCompletions, ex);
  }
  void HandleChat(HttpExchange& ex) { HandleGeneration(Endpoint::kChat, ex); }
  void HandleGeneration(Endpoint endpoint, HttpExchange& ex);
  void HandleTokenize(HttpExchange& ex);
  void HandleMetrics(HttpExchange& ex);
  void HandleDetokenize(HttpExchange& ex);
  HttpResponse Health() const;
  void SampleStatus();  // the sampler thread

  OpenAiFrontend frontend_;
  const TokenStore* tokens_;
  std::unique_ptr<HttpTransport> transport_;
  StatusHistory history_;
  absl::Notification stop_sampling_;
  std::thread sampler_;
  std::atomic<bool> stopped_{false};
};

absl::StatusOr<int> HttpApi::Listen(const ServerConfig& config) {
  auto hp = ParseListenAddress("--http-listen", config.http_listen_address);
  if (!hp.ok()) return hp.status();
  if (!config.tls.enabled() && !config.insecure &&
      !IsLoopbackAddress(config.http_listen_address)) {
    return absl::InvalidArgumentError(
        "--http-listen on a non-loopback address needs TLS (--tls-cert, "
        "--tls-key) or --insecure");
  }
  HttpTransportOptions options;
  options.http = config.http;
  options.tls = config.tls;
  ServiceState* state = &frontend_.state();
  options.closing = [state]() { return state->draining(); };
  auto transport = HttpTransport::Listen(
      options, hp->host, hp->port,
      [this](std::shared_ptr<HttpExchange> ex) { Handle(std::move(ex)); });
  if (!transport.ok()) return transport.status();
  transport_ = *std::move(transport);
  const int port = transport_->port();
  sampler_ = std::thread([this] { SampleStatus(); });
  LogInfo(absl::StrCat("http listening on ", hp->host, ":", port,
                       config.tls.enabled() ? " (HTTPS)" : " (plain HTTP)",
                       "; OpenAI-compatible API under /v1, status page at /"));
  return port;
}

void HttpApi::Stop() {
  if (stopped_.exchange(true)) return;
  if (transport_ != nullptr) transport_->Stop();
  stop_sampling_.Notify();
  if (sampler_.joinable()) sampler_.join();
}

void HttpApi::SampleStatus() {
  do {
    auto counters = ReadStatusCounters(frontend_.state());
    if (counters.ok()) history_.Record(*counters);
  } while (!stop_sampling_.WaitForNotificationWithTimeout(kStatusPeriod));
}

HttpResponse HttpApi::Health() const {
  auto b = frontend_.state().Backend();
  if (b.ok()) {
    const absl::Status failure = b->engine->backend_failure();
    if (failure.ok()) return JsonResponse(200, R"({"status": "ok"})");
    // No Retry-After: a failed backend does not come back by itself.
    return JsonResponse(
        503,
        nlohmann::json{{"status", "failed"},
                       {"error", std::string(failure.message())}}
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  HttpResponse r = JsonResponse(503, frontend_.state().draining()
                                         ? R"({"status": "draining"})"
                                         : R"({"status": "loading"})");
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

void HttpApi::Handle(std::shared_ptr<HttpExchange> ex) {
  const HttpRequest& req = ex->request();
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  auto wrong_method = [&](const char* allow) {
    HttpResponse r = ErrorResponse(absl::InvalidArgumentError(
        absl::StrCat(req.method, " is not allowed on ", path)));
    r.status = 405;
    r.headers.emplace_back("Allow", allow);
    ex->Reply(std::move(r));
  };
  if (path == "/") {
    // The page holds no data: it is public, and the data it fetches from
    // /v1/status needs the token like every /v1 route.
    if (!get) return wrong_method("GET");
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.headers = {{"Content-Security-Policy", kPagePolicy},
                 {"X-Content-Type-Options", "nosniff"},
                 {"Cache-Control", "no-cache"}};
    r.body = std::string(StatusPageHtml());
    return ex->Reply(std::move(r));
  }
  if (path == "/health") {
    if (!get) return wrong_method("GET");
    return ex->Reply(Health());
  }
  struct Route {
    const char* path;
    bool post;
    void (HttpApi::*handler)(HttpExchange&);
  };
  static constexpr Route kRoutes[] = {
      {"/v1/models", false, &HttpApi::HandleModels},
      {"/v1/status", false, &HttpApi::HandleStatus},
      {"/v1/completions", true, &HttpApi::HandleCompletions},
      {"/v1/chat/completions", true, &HttpApi::HandleChat},
      {"/tokenize", true, &HttpApi::HandleTokenize},
      {"/detokenize", true, &HttpApi::HandleDetokenize},
      {"/metrics", false, &HttpApi::HandleMetrics},
  };
  for (const Route& r : kRoutes) {
    if (path != r.path) continue;
    if (r.post ? !post : !get) return wrong_method(r.post ? "POST" : "GET");
    return Offload(std::move(ex), r.handler);
  }
  if (absl::StartsWith(path, "/v1/models/")) {
    if (!get) return wrong_method("GET");
    return Offload(std::move(ex), &HttpApi::HandleModel);
  }
  ex->Reply(ErrorResponse(absl::NotFoundError(
      absl::StrCat("no route for ", req.method, " ", path))));
}

void HttpApi::Offload(std::shared_ptr<HttpExchange> ex,
                      void (HttpApi::*handler)(HttpExchange&)) {
  auto task = [this, ex, handler]() { (this->*handler)(*ex); };
  if (!frontend_.state().blocking_pool().Post(std::move(task))) {
    ex->Reply(ErrorResponse(absl::UnavailableError("server is stopping")));
  }
}

absl::StatusOr<std::string> HttpApi::Authenticate(
    const HttpRequest& req) const {
  if (tokens_ == nullptr) return std::string(kAnonymousTenant);
  const std::string header(req.Header("Authorization"));
  const auto token = BearerToken(header);
  if (!req.HasHeader("Authorization")) {
    return absl::UnauthenticatedError(
        "missing credentials: send 'Authorization: Bearer TOKEN'");
  }
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        "malformed Authorization header: expected 'Bearer TOKEN'");
  }
  if (auto t = tokens_->TenantOf(*token); t.has_value()) return *std::move(t);
  return absl::UnauthenticatedError("unknown bearer token");
}

HttpResponse Unauthenticated(const absl::Status& s) {
  HttpResponse r = ErrorResponse(s);
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

void HttpApi::HandleModels(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  if (auto b = frontend_.state().Backend(); !b.ok()) {
    return ex.Reply(ErrorResponse(b.status()));
  }
  ex.Reply(
      JsonResponse(200, ModelsBody(frontend_.model_id(), NowUnixSeconds())));
}

void HttpApi::HandleModel(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  if (auto b = frontend_.state().Backend(); !b.ok()) {
    return ex.Reply(ErrorResponse(b.status()));
  }
  const std::string id = ex.request().path.substr(sizeof("/v1/models/") - 1);
  if (id != frontend_.model_id()) {
    absl::Status s = absl::NotFoundError(
        absl::StrCat("The model '", id, "' does not exist (GET /v1/models)"));
    HttpResponse r = ErrorResponse(s);
    r.body = ErrorBody(s, "model", "model_not_found");
    return ex.Reply(std::move(r));
  }
  ex.Reply(
      JsonResponse(200, ModelBody(frontend_.model_id(), NowUnixSeconds())));
}

// Prometheus' text exposition on the API port too (the same text as
// --metrics-address serves, server/http/metrics_endpoint.h), with the API's
// token rule: a scrape config sends `authorization: {credentials: TOKEN}` when
// tokens are on. 404 when the server keeps no metrics.
void HttpApi::HandleMetrics(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  const ServerMetrics* metrics = frontend_.state().metrics();
  if (metrics == nullptr) {
    return ex.Reply(
        ErrorResponse(absl::NotFoundError("this server keeps no metrics")));
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics->Serialize();
  ex.Reply(std::move(r));
}

// Server-wide numbers for every authenticated caller; the session list
// holds the caller's tenant's sessions only.
void HttpApi::HandleStatus(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  auto status =
      CollectStatus(frontend_.state(), *tenant, kStatusMaxListed, &history_);
  if (!status.ok()) return ex.Reply(ErrorResponse(status.status()));
  HttpResponse r = JsonResponse(200, StatusJson(*status));
  r.headers.emplace_back("Cache-Control", "no-store");
  ex.Reply(std::move(r));
}

// Blocking pool: parse, tokenize, resolve the session and submit; the
// answer comes from the job (engine thread -> I/O thread).
void HttpApi::HandleGeneration(Endpoint endpoint, HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  RequestRecord rec;  // requests refused before a job runs
  rec.rpc =
      endpoint == Endpoint::kChat ? "http.ChatCompletions" : "http.Completions";
  auto tenant = Authenticate(req);
  if (!tenant.ok()) {
    LogRequest(frontend_.state().metrics(), rec,
               grpc::Status(grpc::StatusCode::UNAUTHENTICATED, ""));
    return ex.Reply(Unauthenticated(tenant.status()));
  }
  rec.tenant = *tenant;
  auto refuse = [&](const absl::Status& s) {
    LogRequest(frontend_.state().metrics(), rec, ToGrpcStatus(s));
    ex.Reply(ErrorResponse(s));
  };
  auto request = ParseOpenAiRequest(req.body, endpoint);
  if (!request.ok()) return refuse(request.status());
  SessionChoice choice;
  choice.session_id = std::string(req.Header("x-session-id"));
  choice.fork = req.Header("x-session-fork") == "1";
  if (ValidateSessionId(choice.session_id).ok()) {
    rec.session_id = choice.session_id;  // never unvalidated text in logs
  }
  auto started = frontend_.Start(*tenant, choice, *request);
  if (!started.ok()) return refuse(started.status());
  std::vector<std::pair<std::string, std::string>> headers;
  if (!started->session_id.empty()) {
    headers.emplace_back("x-session-id", started->session_id);
  }
  AnswerSpec spec;
  spec.head = {endpoint, NewResponseId(endpoint), NowUnixSeconds(),
               frontend_.model_id()};
  spec.options = frontend_.Options(*request);
  spec.tool_syntax = started->tool_syntax;
  spec.max_tool_calls = request->parallel_tool_calls ? 0 : 1;
  spec.prompt_tokens = started->prompt_tokens;
  spec.cached_tokens = started->cached_tokens;
  std::shared_ptr<HttpExchange> self = ex.shared_from_this();
  const bool stream = request->stream;
  if (std::shared_ptr<ChoiceGroup> group = started->group) {
    // n > 1: answered once the prompt is in and the choices run (or with
    // what stopped them: every status before the first byte).
    ex.OnClientGone([group]() { group->Cancel(); });
    group->Run([self, spec, headers, stream](absl::StatusOr<ChoiceJobs> jobs) {
      if (!jobs.ok()) return self->Reply(ErrorResponse(jobs.status()));
      Answer(self, *std::move(jobs), spec, headers, stream);
    });
    return;
  }
  std::shared_ptr<GenerationJob> job = started->job;
  // The client gone (streaming or not): cancelled at the next engine step,
  // the session restored as for a cancelled gRPC call.
  ex.OnClientGone([job]() { job->Cancel(); });
  Answer(self, {job}, spec, std::move(headers), stream);
}

void Answer(const std::shared_ptr<HttpExchange>& ex, ChoiceJobs jobs,
            const AnswerSpec& spec, Headers headers, bool stream) {
  if (stream) {
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.headers = std::move(headers);
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("X-Accel-Buffering", "no");  // nginx: no buffering
    r.stream = ChoicesSseSource(std::move(jobs), spec);
    return ex->Reply(std::move(r));
  }
  // Not streaming: the answer once the jobs end, built on the I/O thread.
  WhenAnswered(
      ex, std::move(jobs), spec,
      [ex, headers](absl::StatusOr<std::string> body, const JobResult* r) {
        if (!body.ok()) return ex->Reply(ErrorResponse(body.status()));
        HttpResponse res = JsonResponse(200, *std::move(body));
        res.headers = headers;
        res.headers.emplace_back("x-session-tokens",
                                 absl::StrCat(r->session_tokens));
        ex->Reply(std::move(res));
      });
}

void HttpApi::HandleTokenize(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  auto body = frontend_.Tokenize(ex.request().body);
  if (!body.ok()) return ex.Reply(ErrorResponse(body.status()));
  ex.Reply(JsonResponse(200, *std::move(body)));
}

void HttpApi::HandleDetokenize(HttpExchange& ex) {
  auto tenant = Authenticate(ex.request());
  if (!tenant.ok()) return ex.Reply(Unauthenticated(tenant.status()));
  auto body = frontend_.Detokenize(ex.request().body);
  if (!body.ok()) return ex.Reply(ErrorResponse(body.status()));
  ex.Reply(JsonResponse(200, *std::move(body)));
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
