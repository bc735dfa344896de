#include "server/http/http_transport.h"

#include <sys/resource.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/http/response_head.h"

namespace ckv::server::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// One event loop: an io_context run by one thread. Posts after Stop are
// dropped (alive false), so nothing outlives the transport's threads.
struct IoLoop {
  asio::io_context ctx{1};
  // Keeps run() going until Stop: then it returns once every connection's
  // handlers are done.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>>
      guard{ctx.get_executor()};
  std::mutex mu;
  bool alive = true;  // guarded by mu
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    if (alive) asio::post(ctx, std::move(fn));
  }
};

// What exchanges and the transport need of a connection.
class ConnectionBase : public std::enable_shared_from_this<ConnectionBase> {
 public:
  ConnectionBase(HttpTransport& transport, std::string address,
                 std::shared_ptr<IoLoop> loop)
      : transport_(transport),
        address_(std::move(address)),
        loop_(std::move(loop)) {}
  virtual ~ConnectionBase() {
    transport_.Untrack(this);
    transport_.Release(address_);
  }
  virtual void Start() = 0;
  // I/O thread.
  virtual void Deliver(HttpExchange* exchange, HttpResponse response) = 0;
  virtual void Close() = 0;
  // Closes now if idle, else after the answer being written.
  virtual void Drain() = 0;
  const std::shared_ptr<IoLoop>& loop() const { return loop_; }

 protected:
  HttpTransport& transport_;
  const std::string address_;
  const std::shared_ptr<IoLoop> loop_;
};

namespace {

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, tcp::socket>;

template <class Stream>
class Connection final : public ConnectionBase {
 public:
  template <class... Args>
  Connection(HttpTransport& transport, std::string address,
             std::shared_ptr<IoLoop> loop, Args&&... args)
      : ConnectionBase(transport, std::move(address), std::move(loop)),
        opt_(transport.options().http),
        stream_(std::forward<Args>(args)...),
        read_timer_(loop_->ctx),
        write_timer_(loop_->ctx) {}

  void Start() override {
    if (transport_.stopping()) return Shut();
    if constexpr (kIsTls<Stream>) {
      ArmRead(opt_.header_timeout_seconds);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = Self()](const error_code& ec) {
                                if (ec) return self->Shut();
                                self->BeginIdle();
                                self->DoRead();
                              });
    } else {
      BeginIdle();
      DoRead();
    }
  }

  void Close() override {
    if (exchange_ != nullptr) ClientGone();
    Shut();
  }

  void Drain() override {
    if (exchange_ == nullptr && !writing_) Shut();
    // Otherwise ServerClosing() closes it once the answer is written.
  }

  void Deliver(HttpExchange* exchange, HttpResponse r) override {
    if (closed_ || exchange != exchange_.get()) {
      if (r.stream != nullptr) r.stream->Cancel();
      return;
    }
    const bool close = close_after_ || ServerClosing();
    close_after_ = close;
    if (r.stream == nullptr) {
      // HEAD: the header of the GET answer, no body.
      const bool head = exchange_->request().method == "HEAD";
      Write(ResponseHead(r, false, close) + (head ? std::string() : r.body));
      response_complete_ = true;
      return;
    }
    // HTTP/1.0: no chunked coding; the body ends with the connection.
    chunked_ = exchange_->request().version >= 11;
    if (!chunked_) close_after_ = true;
    Write(ResponseHead(r, chunked_, close_after_));
    body_ = r.stream;
    std::weak_ptr<ConnectionBase> weak = weak_from_this();
    auto loop = loop_;
    auto scheduled = std::make_shared<std::atomic<bool>>(false);
    body_->SetWake([weak, loop, scheduled]() {
      if (scheduled->exchange(true)) return;  // one pending pump is enough
      loop->Post([weak, scheduled]() {
        scheduled->store(false);
        if (auto c = weak.lock()) static_cast<Connection*>(c.get())->Pump();
      });
    });
    Pump();
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };

  std::shared_ptr<Connection> Self() {
    return std::static_pointer_cast<Connection>(shared_from_this());
  }
  tcp::socket& socket() {
    if constexpr (kIsTls<Stream>) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }
  bool ServerClosing() const {
    const auto& f = transport_.options().closing;
    return transport_.stopping() || (f && f());
  }

  // ---- timers ----
  void ArmRead(int seconds) {
    ++read_generation_;
    read_timer_.expires_after(std::chrono::seconds(seconds));
    read_timer_.async_wait(
        [self = Self(), gen = read_generation_](const error_code& ec) {
          if (!ec && gen == self->read_generation_) self->OnReadTimeout();
        });
  }
  void DisarmRead() {
    ++read_generation_;
    read_timer_.cancel();
  }
  void OnReadTimeout() {
    switch (phase_) {
      case Phase::kHeader:
      case Phase::kBody:
        return RefuseAndClose(408, "request not received in time");
      case Phase::kHandling:
        return;
      default:
        return Shut();
    }
  }

  // ---- reading ----
  void BeginIdle() {
    phase_ = Phase::kIdle;
    ArmRead(opt_.idle_timeout_seconds);
  }

  void DoRead() {
    if (reading_ || closed_) return;
    // While a request runs, bytes of the next are buffered up to a bound;
    // reading goes on so that a disconnect is seen at once.
    if (phase_ == Phase::kHandling &&
        static_cast<int64_t>(inbuf_.size()) > opt_.max_header_bytes) {
      return;
    }
    reading_ = true;
    stream_.async_read_some(asio::buffer(read_buf_),
                            [self = Self()](const error_code& ec, size_t n) {
                              self->reading_ = false;
                              self->OnRead(ec, n);
                            });
  }

  void OnRead(const error_code& ec, size_t n) {
    if (closed_) return;
    if (ec) {
      if (exchange_ != nullptr) ClientGone();
      return Shut();
    }
    if (phase_ == Phase::kLinger) return DoRead();  // discarded
    inbuf_.append(read_buf_.data(), n);
    if (phase_ != Phase::kHandling) Parse();
    DoRead();
  }

  void Parse() {
    while (!closed_ && phase_ != Phase::kHandling && phase_ != Phase::kLinger &&
           !inbuf_.empty()) {
      if (parser_ == nullptr) {
        // Blank lines before a request line are ignored (RFC 9112 2.2).
        size_t skip = 0;
        while (skip < inbuf_.size() &&
               (inbuf_[skip] == '\r' || inbuf_[skip] == '\n')) {
          ++skip;
        }
        inbuf_.erase(0, skip);
        if (inbuf_.empty()) return;
        parser_ = std::make_unique<RequestParser>(Limits());
        phase_ = Phase::kHeader;
        ArmRead(opt_.header_timeout_seconds);
      }
      size_t used = 0;
      const auto state = parser_->Feed(inbuf_, &used);
      inbuf_.erase(0, used);
      switch (state) {
        case RequestParser::State::kNeedMore:
          return;
        case RequestParser::State::kHeaderDone:
          if (phase_ == Phase::kHeader) {
            phase_ = Phase::kBody;
            ArmRead(opt_.body_timeout_seconds);
            if (parser_->request().expect_continue) {
              Write("HTTP/1.1 100 Continue\r\n\r\n");
            }
          }
          return;
        case RequestParser::State::kError:
          return RefuseAndClose(parser_->error_status(),
                                parser_->error_message());
        case RequestParser::State::kDone:
          Dispatch();
          return;
      }
    }
  }

  RequestLimits Limits() const {
    RequestLimits l;
    l.max_uri_bytes = opt_.max_uri_bytes;
    l.max_header_bytes = opt_.max_header_bytes;
    l.max_header_count = opt_.max_header_count;
    l.max_body_bytes = opt_.max_body_bytes;
    return l;
  }

  void Dispatch() {
    phase_ = Phase::kHandling;
    DisarmRead();
    HttpRequest request = std::move(parser_->request());
    parser_.reset();
    close_after_ = !request.keep_alive;
    response_complete_ = false;
    exchange_ = std::make_shared<HttpExchange>(std::move(request), address_,
                                               weak_from_this(), loop_);
    transport_.handler()(exchange_);
  }

  // A request that cannot be read: answered, then the connection closes
  // (its framing is unknown).
  void RefuseAndClose(int status, std::string message) {
    DisarmRead();
    parser_.reset();  // `message` is a copy: it may have been the parser's
    HttpResponse r;
    r.status = status;
    r.body = ErrorJson(status, message);
    close_after_ = true;
    phase_ = Phase::kHandling;
    Write(ResponseHead(r, false, true) + r.body);
    response_complete_ = true;
  }

  // ---- writing ----
  void Write(std::string bytes) {
    out_.push_back(std::move(bytes));
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    if (closed_ || out_.empty()) return;
    writing_ = true;
    ++write_generation_;
    write_timer_.expires_after(
        std::chrono::seconds(opt_.write_timeout_seconds));
    write_timer_.async_wait(
        [self = Self(), gen = write_generation_](const error_code& ec) {
          if (!ec && gen == self->write_generation_ && self->writing_) {
            self->Close();  // a reader that does not read
          }
        });
    asio::async_write(
        stream_, asio::buffer(out_.front()),
        [self = Self()](const error_code& ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(const error_code& ec) {
    writing_ = false;
    ++write_generation_;
    write_timer_.cancel();
    if (closed_) return;
    if (ec) return Close();
    out_.pop_front();
    if (!out_.empty()) return DoWrite();
    if (body_ != nullptr) return Pump();
    if (response_complete_) FinishExchange();
  }

  // Moves what the stream has into the write queue (one write at a time:
  // a slow reader holds text in the job, not here).
  void Pump() {
    if (closed_ || body_ == nullptr || writing_) return;
    std::string text;
    const bool done = body_->Pull(&text);
    if (!text.empty()) {
      Write(chunked_
                ? absl::StrCat(absl::Hex(text.size()), "\r\n", text, "\r\n")
                : std::move(text));
    }
    if (!done) return;
    body_ = nullptr;
    response_complete_ = true;
    if (chunked_) {
      Write("0\r\n\r\n");
    } else if (!writing_) {
      FinishExchange();
    }
  }

  void FinishExchange() {
    exchange_ = nullptr;
    response_complete_ = false;  // a 100 Continue of the next request is not
                                 // its answer
    if (close_after_ || ServerClosing()) return Linger();
    BeginIdle();
    Parse();  // a pipelined request already read
    DoRead();
  }

  // Half-closes, then reads (and drops) what the client still sends for a
  // moment, so that the answer is not lost to a reset.
  void Linger() {
    if (transport_.stopping()) return Shut();
    phase_ = Phase::kLinger;
    error_code ignored;
    socket().shutdown(tcp::socket::shutdown_send, ignored);
    ArmRead(2);
    DoRead();
  }

  void ClientGone() {
    auto exchange = std::move(exchange_);
    exchange_ = nullptr;
    if (body_ != nullptr) body_->Cancel();
    body_ = nullptr;
    if (exchange != nullptr) exchange->ClientGone();
  }

  void Shut() {
    if (closed_) return;
    closed_ = true;
    phase_ = Phase::kClosed;
    if (body_ != nullptr) body_->Cancel();
    body_ = nullptr;
    DisarmRead();
    write_timer_.cancel();
    error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

  const HttpConfig& opt_;
  Stream stream_;
  asio::steady_timer read_timer_;
  asio::steady_timer write_timer_;
  uint64_t read_generation_ = 0;
  uint64_t write_generation_ = 0;
  std::array<char, 16384> read_buf_;
  std::string inbuf_;  // read, not yet parsed
  std::unique_ptr<RequestParser> parser_;
  std::shared_ptr<HttpExchange> exchange_;  // the request being answered
  std::shared_ptr<BodySource> body_;        // its streamed body
  std::deque<std::string> out_;
  Phase phase_ = Phase::kIdle;
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool close_after_ = false;
  bool chunked_ = true;
  bool response_complete_ = false;
};

// Lets the process hold the connections it may accept.
void RaiseOpenFileLimit(int connections) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t want = static_cast<rlim_t>(connections) + 1024;
  if (r.rlim_cur >= want) return;
  r.rlim_cur = std::min(want, r.rlim_max);
  (void)setrlimit(RLIMIT_NOFILE, &r);
}

}  // namespace

// ---- HttpExchange -----------------------------------------------------------

HttpExchange::HttpExchange(HttpRequest request, std::string peer,
                           std::weak_ptr<ConnectionBase> connection,
                           std::shared_ptr<IoLoop> loop)
    : request_(std::move(request)),
      peer_(std::move(peer)),
      connection_(std::move(connection)),
      loop_(std::move(loop)) {}

void HttpExchange::Reply(HttpResponse response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (replied_) return;
    replied_ = true;
  }
  auto stream = response.stream;
  auto shared = std::make_shared<HttpResponse>(std::move(response));
  std::weak_ptr<ConnectionBase> weak = connection_;
  // Deliver checks that this is still the connection's exchange.
  std::shared_ptr<HttpExchange> self = shared_from_this();
  bool posted = false;
  {
    std::lock_guard<std::mutex> lock(loop_->mu);
    if (loop_->alive) {
      posted = true;
      asio::post(loop_->ctx, [weak, self, shared]() {
        if (auto c = weak.lock()) {
          c->Deliver(self.get(), std::move(*shared));
        } else if (shared->stream != nullptr) {
          shared->stream->Cancel();
        }
      });
    }
  }
  if (!posted && stream != nullptr) stream->Cancel();
}

void HttpExchange::Post(std::function<void()> fn) {
  std::weak_ptr<ConnectionBase> weak = connection_;
  loop_->Post([weak, fn = std::move(fn)]() {
    if (weak.lock() != nullptr) fn();
  });
}

void HttpExchange::OnClientGone(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gone_) {
      on_gone_ = std::move(fn);
      return;
    }
  }
  fn();
}

void HttpExchange::ClientGone() {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone_ = true;
    fn = std::move(on_gone_);
    on_gone_ = nullptr;
  }
  if (fn) fn();
}

// ---- HttpTransport
// ------------------------------------------------------------

class HttpTransport::Acceptor {
 public:
  Acceptor(HttpTransport& t, asio::io_context& ctx) : t_(t), acceptor_(ctx) {}

  // Binds the first endpoint of host:port that binds and listens.
  absl::Status Bind(const std::string& host, int port) {
    const std::string where = absl::StrCat(
        host.find(':') == std::string::npos ? host : "[" + host + "]", ":",
        port, " (", t_.options().flag, ")");
    auto endpoints = Resolve(host, port);
    if (!endpoints.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot resolve ", where, ": ",
                                                 endpoints.status().message()));
    }
    error_code ec;
    for (const tcp::endpoint& ep : *endpoints) {
      error_code ignored;
      acceptor_.close(ignored);
      acceptor_.open(ep.protocol(), ec);
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(ep, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) break;
    }
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", where, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }
  int port() const { return port_; }

  void Accept() {
    auto& loop = t_.loops_[next_++ % t_.loops_.size()];
    acceptor_.async_accept(
        loop->ctx, [this, loop](const error_code& ec, tcp::socket socket) {
          if (ec == asio::error::operation_aborted || !acceptor_.is_open()) {
            return;
          }
          if (!ec) Admit(loop, std::move(socket));
          Accept();
        });
  }

  void Close() {
    error_code ignored;
    acceptor_.close(ignored);
  }

 private:
  void Admit(const std::shared_ptr<IoLoop>& loop, tcp::socket socket) {
    error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (ec) return;
    socket.set_option(tcp::no_delay(true), ec);
    const std::string address = remote.address().to_string();
    bool per_address_full = false;
    if (!t_.Admit(address, &per_address_full)) {
      // Plain HTTP: a short answer on the fresh socket (its send buffer is
      // empty, so the write does not block); TLS: closed.
      if (!t_.tls()) {
        HttpResponse r;
        r.status = per_address_full ? 429 : 503;
        r.body =
            ErrorJson(r.status, per_address_full ? "too many connections from "
                                                   "this address"
                                                 : "too many open connections");
        r.headers.emplace_back("Retry-After", "1");
        const std::string bytes = ResponseHead(r, false, true) + r.body;
        socket.non_blocking(true, ec);
        socket.write_some(asio::buffer(bytes), ec);
        socket.shutdown(tcp::socket::shutdown_send, ec);
      }
      return;
    }
    std::shared_ptr<ConnectionBase> c;
    if (t_.tls()) {
      c = std::make_shared<Connection<ssl::stream<tcp::socket>>>(
          t_, address, loop, std::move(socket),
          *static_cast<ssl::context*>(t_.ssl_context()));
    } else {
      c = std::make_shared<Connection<tcp::socket>>(t_, address, loop,
                                                    std::move(socket));
    }
    t_.Track(c);
    // The connection's own loop starts it.
    loop->Post([c]() { c->Start(); });
  }

  // An IP literal or empty host as is; "localhost" as 127.0.0.1 (not ::1
  // first, whatever the resolver's order); other names through the system
  // resolver (at start-up, before the I/O threads run).
  absl::StatusOr<std::vector<tcp::endpoint>> Resolve(const std::string& host,
                                                     int port) {
    const auto p = static_cast<uint16_t>(port);
    if (host.empty()) return std::vector<tcp::endpoint>{{tcp::v4(), p}};
    error_code ec;
    const auto literal =
        asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
    if (!ec) return std::vector<tcp::endpoint>{{literal, p}};
    tcp::resolver resolver(acceptor_.get_executor());
    const auto results = resolver.resolve(
        host, std::to_string(port),
        tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) return absl::UnavailableError(ec.message());
    std::vector<tcp::endpoint> out;
    for (const auto& r : results) out.push_back(r.endpoint());
    if (out.empty()) return absl::UnavailableError("no address");
    return out;
  }

  HttpTransport& t_;
  tcp::acceptor acceptor_;
  size_t next_ = 0;
  int port_ = 0;
};

HttpTransport::HttpTransport(const HttpTransportOptions& options,
                             HttpHandler handler)
    : options_(options), handler_(std::move(handler)) {}

absl::StatusOr<std::unique_ptr<HttpTransport>> HttpTransport::Listen(
    const HttpTransportOptions& options, const std::string& host, int port,
    HttpHandler handler) {
  std::unique_ptr<HttpTransport> t(
      new HttpTransport(options, std::move(handler)));
  if (options.tls.enabled()) {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    error_code ec;
    ctx->set_options(ssl::context::default_workarounds |
                         ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                         ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                     ec);
    if (!ec) ctx->use_certificate_chain_file(options.tls.cert_file, ec);
    if (!ec)
      ctx->use_private_key_file(options.tls.key_file, ssl::context::pem, ec);
    if (!ec && !options.tls.client_ca_file.empty()) {
      ctx->load_verify_file(options.tls.client_ca_file, ec);
      if (!ec) {
        ctx->set_verify_mode(
            ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
      }
    }
    if (ec) {
      return absl::UnavailableError(absl::StrCat(
          options.flag,
          ": cannot load --tls-cert/--tls-key/--tls-client-ca for HTTPS: ",
          ec.message()));
    }
    t->ssl_context_ = ctx;
  }
  RaiseOpenFileLimit(options.http.max_connections);
  const int threads = std::max(1, options.http.io_threads);
  for (int i = 0; i < threads; ++i)
    t->loops_.push_back(std::make_shared<IoLoop>());
  t->acceptor_ = std::make_unique<Acceptor>(*t, t->loops_[0]->ctx);
  if (auto s = t->acceptor_->Bind(host, port); !s.ok()) return s;
  t->port_ = t->acceptor_->port();
  t->acceptor_->Accept();
  for (auto& loop : t->loops_) {
    t->threads_.emplace_back([loop]() { loop->ctx.run(); });
  }
  return t;
}

HttpTransport::~HttpTransport() { Stop(); }

void HttpTransport::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  // On the acceptor's loop, where connections are tracked: no connection
  // is added after the snapshot. First idle connections close and busy ones
  // finish writing their answer (the engine's jobs have ended by now);
  // after kStopGrace the rest are closed.
  auto each = [this](void (ConnectionBase::*action)()) {
    std::vector<std::shared_ptr<ConnectionBase>> open;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [p, weak] : connections_) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open)
      c->loop()->Post([c, action]() { (c.get()->*action)(); });
  };
  loops_[0]->Post([this, each]() {
    acceptor_->Close();
    each(&ConnectionBase::Drain);
  });
  constexpr auto kStopGrace = std::chrono::seconds(2);
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  while (open_connections() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  loops_[0]->Post([this, each]() {
    each(&ConnectionBase::Close);
    // Closed connections finish their handlers; then run() returns.
    for (auto& loop : loops_) {
      loop->Post([loop]() { loop->guard.reset(); });
    }
  });
  for (auto& th : threads_) th.join();
  threads_.clear();
  for (auto& loop : loops_) {
    std::lock_guard<std::mutex> lock(loop->mu);
    loop->alive = false;
  }
  acceptor_.reset();
}

int HttpTransport::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

bool HttpTransport::Admit(const std::string& address, bool* per_address_full) {
  std::lock_guard<std::mutex> lock(mu_);
  int& n = per_address_[address];
  *per_address_full = n >= options_.http.max_connections_per_address;
  if (*per_address_full || open_ >= options_.http.max_connections) {
    if (n == 0) per_address_.erase(address);
    return false;
  }
  ++n;
  ++open_;
  return true;
}

void HttpTransport::Release(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
  --open_;
}

void HttpTransport::Track(const std::shared_ptr<ConnectionBase>& c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_[c.get()] = c;
}

void HttpTransport::Untrack(const ConnectionBase* c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(c);
}

}  // namespace ckv::server::http
