// The HTTP/1.1 transport of the HTTP API: Boost.Asio/Beast, event-driven.
// A fixed number of I/O threads (one io_context each) serve every
// connection; none blocks and no thread is made per connection. Per
// connection: header, body, idle keep-alive and write timeouts; the limits
// of RequestParser; requests read one after another, so pipelined requests
// are answered in order; a peer that disconnects while its request runs is
// reported to the handler (HttpExchange::OnClientGone). Caps on open
// connections in all and per client address. Handlers run on an I/O thread
// and must not block: they hand work to other threads and answer through
// the exchange from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http/request_parser.h"
#include "server/server_config.h"

namespace ckv::server::http {

// A streamed response body (server-sent events), sent chunked.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // `wake` may be called from any thread (cheap, never blocks) whenever Pull
  // has something new; set once, before the first Pull.
  virtual void SetWake(std::function<void()> wake) = 0;
  // I/O thread: appends what is ready to `out` without blocking; true once
  // the body is complete (everything appended).
  virtual bool Pull(std::string* out) = 0;
  // The client went away (or the server closes) before the end.
  virtual void Cancel() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::shared_ptr<BodySource> stream;  // set: the body comes from it
};

class ConnectionBase;
struct IoLoop;

// One request being answered. The handler gets it on an I/O thread and may
// keep it on any thread.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  HttpExchange(HttpRequest request, std::string peer,
               std::weak_ptr<ConnectionBase> connection,
               std::shared_ptr<IoLoop> loop);
  const HttpRequest& request() const { return request_; }
  const std::string& peer() const { return peer_; }  // client IP address

  // Answers (any thread; the first call counts). A stream is cancelled when
  // the connection is gone.
  void Reply(HttpResponse response);
  // Runs `fn` on the connection's I/O thread while the connection lives;
  // dropped otherwise.
  void Post(std::function<void()> fn);
  // `fn` runs once if the client disconnects (or the server closes the
  // connection) before the answer is written; at once if it already has.
  void OnClientGone(std::function<void()> fn);
  // I/O thread (the connection): the client is gone.
  void ClientGone();

 private:
  const HttpRequest request_;
  const std::string peer_;
  const std::weak_ptr<ConnectionBase> connection_;
  const std::shared_ptr<IoLoop> loop_;
  std::mutex mu_;
  bool replied_ = false;           // guarded by mu_
  bool gone_ = false;              // guarded by mu_
  std::function<void()> on_gone_;  // guarded by mu_
};

using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

struct HttpTransportOptions {
  HttpConfig http;                     // limits, timeouts, threads
  TlsConfig tls;                       // cert set: HTTPS
  std::string flag = "--http-listen";  // the flag that set the address
  // True while the server drains: answers carry "Connection: close".
  std::function<bool()> closing;
};

class HttpTransport {
 public:
  // Binds host:port (0: ephemeral; host as in ListenAddress: "localhost"
  // is 127.0.0.1, another name binds the first of its addresses that
  // binds) and starts the I/O threads. UNAVAILABLE, naming options.flag
  // and host:port, when the name does not resolve, the port cannot be
  // bound or the TLS files cannot be loaded.
  static absl::StatusOr<std::unique_ptr<HttpTransport>> Listen(
      const HttpTransportOptions& options, const std::string& host, int port,
      HttpHandler handler);
  ~HttpTransport();  // Stop()

  int port() const { return port_; }
  int open_connections() const;
  // Stops accepting, closes every connection (their exchanges see
  // OnClientGone) and joins the I/O threads.
  void Stop();

  // Connection bookkeeping (connections call these on their I/O thread).
  bool Admit(const std::string& address, bool* per_address_full);
  void Release(const std::string& address);
  void Track(const std::shared_ptr<ConnectionBase>& c);
  void Untrack(const ConnectionBase* c);
  const HttpTransportOptions& options() const { return options_; }
  const HttpHandler& handler() const { return handler_; }
  bool tls() const { return options_.tls.enabled(); }
  bool stopping() const { return stopping_.load(); }
  // The boost::asio::ssl::context of an HTTPS port (null: plain HTTP).
  void* ssl_context() const { return ssl_context_.get(); }

 private:
  class Acceptor;
  explicit HttpTransport(const HttpTransportOptions& options,
                         HttpHandler handler);

  const HttpTransportOptions options_;
  const HttpHandler handler_;
  int port_ = 0;
  mutable std::mutex mu_;
  int open_ = 0;                                      // guarded by mu_
  std::unordered_map<std::string, int> per_address_;  // guarded by mu_
  // Open connections (registered by Track, removed by their destructor).
  std::unordered_map<const ConnectionBase*, std::weak_ptr<ConnectionBase>>
      connections_;  // guarded by mu_
  std::shared_ptr<void> ssl_context_;
  std::vector<std::shared_ptr<IoLoop>> loops_;
  std::unique_ptr<Acceptor> acceptor_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
};

}  // namespace ckv::server::http
