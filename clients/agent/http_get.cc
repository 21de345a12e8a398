#include "clients/agent/http_get.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace arbiter::agent {
namespace {

constexpr size_t kMaxBody = 64 << 20;

struct Url {
  std::string host;
  std::string port = "80";
  std::string path = "/";
};

absl::StatusOr<Url> ParseUrl(absl::string_view url) {
  if (!absl::ConsumePrefix(&url, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("not an http:// URL: ", url));
  }
  Url out;
  const size_t slash = url.find('/');
  absl::string_view authority = url.substr(0, slash);
  if (slash != absl::string_view::npos) out.path = std::string(url.substr(slash));
  const size_t colon = authority.rfind(':');
  if (colon != absl::string_view::npos && authority.find(']') == absl::string_view::npos) {
    out.port = std::string(authority.substr(colon + 1));
    authority = authority.substr(0, colon);
  }
  absl::ConsumePrefix(&authority, "[");
  absl::ConsumeSuffix(&authority, "]");
  out.host = std::string(authority);
  if (out.host.empty()) return absl::InvalidArgumentError("URL without a host");
  return out;
}

// A connected socket, closed on destruction.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<int> Connect(const Url& url, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", url.host, ": ", gai_strerror(rc)));
  }
  const timeval tv = absl::ToTimeval(timeout);
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    last = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("connect ", url.host, ":", url.port, ": ", last));
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& url_text, absl::Duration timeout) {
  absl::StatusOr<Url> url = ParseUrl(url_text);
  if (!url.ok()) return url.status();
  absl::StatusOr<int> fd = Connect(*url, timeout);
  if (!fd.ok()) return fd.status();
  Socket socket(*fd);
  const std::string request =
      absl::StrCat("GET ", url->path, " HTTP/1.0\r\nHost: ", url->host,
                   "\r\nAccept: text/plain\r\nUser-Agent: arbiter-agent\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(socket.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(socket.fd(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) return absl::UnavailableError(absl::StrCat("receive: ", std::strerror(errno)));
    reply.append(buf, static_cast<size_t>(n));
    if (reply.size() > kMaxBody) return absl::ResourceExhaustedError("reply over 64 MiB");
  }
  const size_t head_end = reply.find("\r\n\r\n");
  if (head_end == std::string::npos) return absl::UnavailableError("reply without a header end");
  const std::string status_line = reply.substr(0, reply.find("\r\n"));
  if (!absl::StartsWith(status_line, "HTTP/1.") || status_line.size() < 12 ||
      status_line.substr(9, 3) != "200") {
    return absl::FailedPreconditionError(absl::StrCat("GET ", url_text, ": ", status_line));
  }
  return reply.substr(head_end + 4);
}

}  // namespace arbiter::agent
