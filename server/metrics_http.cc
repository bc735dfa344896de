#include "server/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ckv::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kMetricsContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r: returns a pointer to the message (maybe not `buf`).
  return strerror_r(err, buf, sizeof(buf));
}

void CloseFd(int fd) {
  if (fd >= 0) close(fd);
}

// Splits "host:port" (host may be "[v6]" or empty). Port must be 0..65535.
absl::Status SplitAddress(const std::string& address, std::string* host,
                          std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not host:port"));
  }
  std::string h = address.substr(0, colon);
  const std::string p = address.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", address, "': bracket an IPv6 host as [host]"));
  }
  uint32_t port_num = 0;
  if (p.empty() || p.size() > 5 ||
      !std::all_of(p.begin(), p.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(p, &port_num) || port_num > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "': bad port '", p, "'"));
  }
  *host = std::move(h);
  *port = p;
  return absl::OkStatus();
}

// Waits until `fd` reports `events`, the deadline passes or `wake_fd` becomes
// readable. True only in the first case.
bool WaitFor(int fd, short events, int wake_fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (fds[1].revents != 0) return false;
    if (fds[0].revents & (POLLERR | POLLNVAL)) return false;
    if (fds[0].revents != 0) return true;  // incl. POLLHUP: recv reports it
  }
}

// Sends all of `data`; false when the peer fails, stalls past the deadline
// or the server is stopping.
bool SendAll(int fd, absl::string_view data, int wake_fd,
             Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd, POLLOUT, wake_fd, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool with_body,
                     absl::string_view extra_headers = {}) {
  std::string out = absl::StrCat(
      "HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n",
      extra_headers, "\r\n");
  if (with_body) out.append(body.data(), body.size());
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, RenderFn render) {
  std::string host, port;
  if (absl::Status s = SplitAddress(address, &host, &port); !s.ok()) return s;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* list = nullptr;
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                              port.c_str(), &hints, &list);
  if (gai != 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics address '", address, "': ", gai_strerror(gai)));
  }
  // The first resolved address that binds and listens wins.
  int listen_fd = -1;
  std::string error = "no address";
  for (addrinfo* ai = list; ai != nullptr && listen_fd < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family,
                          ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          ai->ai_protocol);
    if (fd < 0) {
      error = absl::StrCat("socket: ", ErrnoText(errno));
      continue;
    }
    // Lets a restarted server rebind while old connections sit in
    // TIME_WAIT; a port with a live listener still fails with EADDRINUSE.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      error = absl::StrCat("bind: ", ErrnoText(errno));
      CloseFd(fd);
    } else if (listen(fd, 64) != 0) {
      error = absl::StrCat("listen: ", ErrnoText(errno));
      CloseFd(fd);
    } else {
      listen_fd = fd;
    }
  }
  freeaddrinfo(list);
  if (listen_fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve /metrics on '", address, "': ", error));
  }

  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  int bound_port = 0;
  if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound),
                  &bound_len) == 0) {
    if (bound.ss_family == AF_INET) {
      bound_port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else if (bound.ss_family == AF_INET6) {
      bound_port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
  }

  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int err = errno;
    CloseFd(listen_fd);
    return absl::UnavailableError(absl::StrCat(
        "metrics server on '", address, "': eventfd: ", ErrnoText(err)));
  }
  std::unique_ptr<MetricsHttpServer> server(
      new MetricsHttpServer(listen_fd, wake_fd, bound_port, std::move(render)));

  // An explicit stack size: the default one (RLIMIT_STACK) may be small,
  // and glibc takes static TLS out of it (see the header comment).
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int rc = pthread_attr_setstacksize(&attr, kStackBytes);
  if (rc == 0) {
    rc = pthread_create(&server->thread_, &attr, &MetricsHttpServer::ThreadMain,
                        server.get());
  }
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "metrics server on '", address, "': thread: ", ErrnoText(rc)));
  }
  server->thread_started_ = true;
  return server;
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd, int port,
                                     RenderFn render)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      render_(std::move(render)) {}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_started_) {
    const uint64_t one = 1;
    // Cannot fail short of a counter overflow; the thread polls wake_fd_.
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    pthread_join(thread_, nullptr);
  }
  CloseFd(listen_fd_);
  CloseFd(wake_fd_);
}

void* MetricsHttpServer::ThreadMain(void* self) {
  static_cast<MetricsHttpServer*>(self)->Serve();
  return nullptr;
}

void MetricsHttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;  // only EFAULT/EINVAL/ENOMEM: nothing sensible left to do
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of resources: back off instead of spinning on poll().
        pollfd wake = {wake_fd_, POLLIN, 0};
        if (poll(&wake, 1, 100) > 0) return;
      }
      continue;  // EAGAIN, ECONNABORTED, EINTR, ...: try the next one
    }
    HandleConnection(fd);
    CloseFd(fd);
  }
}

void MetricsHttpServer::HandleConnection(int fd) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(kIoTimeoutMs);
  const std::string response = ReadRequest(fd, deadline);
  if (response.empty()) return;
  if (!SendAll(fd, response, wake_fd_, deadline)) return;
  // Half-close, then discard input already received (e.g. a body or the
  // rest of an oversized head): closing a socket with unread input sends a
  // reset, which can make the peer lose the response. No waiting: a peer
  // that keeps sending is cut off.
  shutdown(fd, SHUT_WR);
  char buf[2048];
  while (recv(fd, buf, sizeof(buf), 0) > 0) {
  }
}

std::string MetricsHttpServer::ReadRequest(int fd, Clock::time_point deadline) {
  std::string request;
  size_t head_end = std::string::npos;
  char buf[2048];
  while (head_end == std::string::npos && request.size() <= kMaxRequestBytes) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      request.append(buf, static_cast<size_t>(n));
      head_end = request.find("\r\n\r\n");
      if (head_end == std::string::npos) head_end = request.find("\n\n");
    } else if (n == 0) {
      return "";  // peer closed before a complete request head
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!WaitFor(fd, POLLIN, wake_fd_, deadline)) return "";
    } else {
      return "";
    }
  }

  constexpr absl::string_view kText = "text/plain; charset=utf-8";
  if (head_end == std::string::npos) {
    return Response("400 Bad Request", kText, "request too large\n", true);
  }
  // Request line: METHOD SP TARGET SP HTTP/x.y
  absl::string_view line(request.data(), request.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const size_t sp1 = line.find(' ');
  const size_t sp2 =
      sp1 == absl::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == absl::string_view::npos ||
      line.find(' ', sp2 + 1) != absl::string_view::npos ||
      line.substr(sp2 + 1).substr(0, 5) != "HTTP/") {
    return Response("400 Bad Request", kText, "bad request line\n", true);
  }
  const absl::string_view method = line.substr(0, sp1);
  absl::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";

  if (method != "GET" && !head) {
    return Response("405 Method Not Allowed", kText, "only GET and HEAD\n",
                    true, "Allow: GET, HEAD\r\n");
  }
  if (path == "/metrics") {
    std::string body;
    try {
      body = render_();
    } catch (const std::exception& e) {
      return Response("500 Internal Server Error", kText,
                      absl::StrCat("rendering metrics failed: ", e.what(), "\n"),
                      !head);
    }
    return Response("200 OK", kMetricsContentType, body, !head);
  }
  if (path == "/") {
    return Response("200 OK", kText, "metrics are at /metrics\n", !head);
  }
  return Response("404 Not Found", kText, "not found\n", !head);
}

}  // namespace ckv::server
