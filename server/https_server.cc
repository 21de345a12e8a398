#include "server/https_server.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace arbiter::server {
namespace {

constexpr size_t kMaxHead = 16 << 10;
constexpr size_t kMaxBody = 4 << 20;
constexpr int kIoTimeoutSeconds = 10;

std::string OpenSslError() {
  char buf[256];
  ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
  return buf;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    default:
      return "Internal Server Error";
  }
}

// Reads from `ssl` into `buf` until it holds "\r\n\r\n"; false on EOF,
// error or a head over kMaxHead.
bool ReadHead(SSL* ssl, std::string& buf, size_t& head_end) {
  char chunk[4096];
  for (;;) {
    if (size_t at = buf.find("\r\n\r\n"); at != std::string::npos) {
      head_end = at + 4;
      return true;
    }
    if (buf.size() > kMaxHead) return false;
    const int n = SSL_read(ssl, chunk, sizeof chunk);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

bool WriteAll(SSL* ssl, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const int n = SSL_write(ssl, data.data() + done, static_cast<int>(data.size() - done));
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool Respond(SSL* ssl, const HttpResponse& r, bool keep_alive) {
  return WriteAll(ssl, absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                                    "\r\nContent-Type: ", r.content_type,
                                    "\r\nContent-Length: ", r.body.size(), "\r\nConnection: ",
                                    keep_alive ? "keep-alive" : "close", "\r\n\r\n", r.body));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpsServer>> HttpsServer::Start(const std::string& listen_address,
                                                                const std::string& cert_file,
                                                                const std::string& key_file,
                                                                Handler handler, int threads) {
  auto server = std::unique_ptr<HttpsServer>(new HttpsServer());
  server->handler_ = std::move(handler);
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  server->ssl_ctx_ = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook-cert: cannot use ", cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook-key: cannot use ", key_file, ": ", OpenSslError()));
  }

  const size_t colon = listen_address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook-listen: want host:port, got ", listen_address));
  }
  std::string host = listen_address.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port = listen_address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook-listen: cannot resolve ", listen_address));
  }
  // Non-blocking: every worker polls it, and those that lose the race for a
  // connection must not block in accept (they could not see stopping_).
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound =
      fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0 && listen(fd, 128) == 0;
  freeaddrinfo(found);
  if (!bound) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("webhook-listen: cannot listen on ", listen_address,
                                               ": ", std::strerror(errno)));
  }
  server->listen_fd_ = fd;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  server->port_ =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  for (int i = 0; i < threads; ++i)
    server->workers_.emplace_back([s = server.get()] { s->Work(); });
  return server;
}

HttpsServer::~HttpsServer() {
  stopping_ = true;
  for (std::thread& t : workers_) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

void HttpsServer::Work() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    // The accepted socket is blocking (flags are not inherited), with
    // timeouts.
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN: another worker took it, or the peer left.
    timeval timeout{kIoTimeoutSeconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    Serve(fd);
    close(fd);
  }
}

void HttpsServer::Serve(int fd) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) != 1) {
    spdlog::debug("webhook: TLS handshake failed: {}", OpenSslError());
    SSL_free(ssl);
    return;
  }
  std::string buf;
  while (!stopping_) {
    size_t head_end = 0;
    if (!ReadHead(ssl, buf, head_end)) break;
    const std::string head = buf.substr(0, head_end);
    buf.erase(0, head_end);
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    std::vector<std::string> start = absl::StrSplit(lines[0], ' ');
    HttpRequest request;
    if (start.size() != 3) {
      Respond(ssl, {400, "text/plain", "bad request line\n"}, false);
      break;
    }
    request.method = start[0];
    request.path = start[1].substr(0, start[1].find('?'));
    int64_t length = -1;
    bool close_after = start[2] == "HTTP/1.0";
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
      const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
      if (name == "content-length" && !absl::SimpleAtoi(value, &length)) length = -2;
      if (name == "connection") close_after = absl::AsciiStrToLower(value) == "close";
      if (name == "transfer-encoding") length = -3;
    }
    if (request.method == "POST" && (length < 0 || length > static_cast<int64_t>(kMaxBody))) {
      Respond(ssl,
              {length > 0 ? 413 : 411, "text/plain",
               "a POST needs a Content-Length of at most 4 MiB\n"},
              false);
      break;
    }
    if (length > 0) {
      char chunk[16384];
      while (buf.size() < static_cast<size_t>(length)) {
        const int n = SSL_read(ssl, chunk, sizeof chunk);
        if (n <= 0) break;
        buf.append(chunk, static_cast<size_t>(n));
      }
      if (buf.size() < static_cast<size_t>(length)) break;
      request.body = buf.substr(0, static_cast<size_t>(length));
      buf.erase(0, static_cast<size_t>(length));
    }
    const HttpResponse response = handler_(request);
    if (!Respond(ssl, response, !close_after) || close_after) break;
  }
  SSL_shutdown(ssl);
  SSL_free(ssl);
}

}  // namespace arbiter::server
