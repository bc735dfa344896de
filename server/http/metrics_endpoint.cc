#include "server/http/metrics_endpoint.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/http/http_transport.h"
#include "server/http/listen_address.h"

namespace ckv::server::http {
namespace {

constexpr char kFlag[] = "--metrics-address";
constexpr char kExpositionType[] = "text/plain; version=0.0.4; charset=utf-8";

HttpResponse Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

HttpResponse Answer(const HttpRequest& request,
                    const MetricsEndpoint::RenderFn& render) {
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse r = Text(405, "only GET and HEAD are served here\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  if (request.path == "/") {
    return Text(200, "clusterkv-server: Prometheus metrics at /metrics\n");
  }
  if (request.path != "/metrics") {
    return Text(404, absl::StrCat("no page ", request.path,
                                  " here; metrics are at /metrics\n"));
  }
  HttpResponse r;
  r.content_type = kExpositionType;
  try {
    r.body = render();
  } catch (const std::exception& e) {
    return Text(500,
                absl::StrCat("rendering the metrics failed: ", e.what(), "\n"));
  }
  return r;
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(RenderFn render)
    : render_(std::move(render)) {}

MetricsEndpoint::~MetricsEndpoint() {
  if (transport_ != nullptr) transport_->Stop();
}

int MetricsEndpoint::port() const { return transport_->port(); }

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address, const HttpConfig& http, RenderFn render) {
  auto listen = ParseListenAddress(kFlag, address);
  if (!listen.ok()) return listen.status();
  std::unique_ptr<MetricsEndpoint> endpoint(
      new MetricsEndpoint(std::move(render)));
  HttpTransportOptions options;
  options.http = http;
  options.http.io_threads = 1;
  options.flag = kFlag;
  const RenderFn* fn = &endpoint->render_;
  auto transport =
      HttpTransport::Listen(options, listen->host, listen->port,
                            [fn](std::shared_ptr<HttpExchange> ex) {
                              ex->Reply(Answer(ex->request(), *fn));
                            });
  if (!transport.ok()) return transport.status();
  endpoint->transport_ = *std::move(transport);
  return endpoint;
}

}  // namespace ckv::server::http
