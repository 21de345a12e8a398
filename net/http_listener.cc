#include "net/http_listener.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

namespace arbiter::net {

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen_address,
                                                 absl::string_view flag) {
  const size_t colon = listen_address.rfind(':');
  ListenAddress out;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen_address.substr(colon + 1), &out.port) || out.port < 0 ||
      out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": want host:port, got ", listen_address));
  }
  out.host = listen_address.substr(0, colon);
  if (out.host.size() > 1 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  // The library reports an address that does not resolve and one that cannot
  // be bound alike; resolve first to tell them apart.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(out.host.empty() ? nullptr : out.host.c_str(), "0", &hints, &found) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot resolve ", listen_address));
  }
  freeaddrinfo(found);
  return out;
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(httplib::Server& http,
                                                                  const ListenAddress& address,
                                                                  absl::string_view flag) {
  http.set_socket_options([](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  // AI_PASSIVE: an empty host is every interface, not the loopback.
  int port = address.port;
  if (port == 0) {
    port = http.bind_to_any_port(address.host, AI_PASSIVE);
  } else if (!http.bind_to_port(address.host, port, AI_PASSIVE)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat(flag, ": cannot listen on ", address.host, ":",
                                               address.port, ": ", std::strerror(errno)));
  }
  auto listener = std::unique_ptr<HttpListener>(new HttpListener(http));
  listener->port_ = port;
  listener->loop_ = std::thread([l = listener.get()] {
    l->http_.listen_after_bind();
    l->loop_done_ = true;
  });
  // `stop()` does nothing until the accept loop runs: wait for it (or for its
  // end, should `accept` fail), so that the destructor cannot miss it.
  while (!http.is_running() && !listener->loop_done_) {
    std::this_thread::yield();
  }
  return listener;
}

HttpListener::~HttpListener() {
  http_.stop();
  if (loop_.joinable()) loop_.join();
}

}  // namespace arbiter::net
