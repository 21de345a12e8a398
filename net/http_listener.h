// The listening half of the project's HTTP servers on cpp-httplib 0.11.4
// (Debian's libcpp-httplib-dev): arbiterd's admission webhook
// (server/https_server.h) and arbiter-agent's health endpoint
// (clients/agent/agent_health.h). It parses and resolves a `host:port` flag,
// binds with SO_REUSEADDR (the library's default, SO_REUSEPORT, would let a
// second process bind the same port and take a share of its connections),
// and runs the accept loop on a thread of its own.
//
// Thread-compatible: start and destroy from one thread; the server's
// handlers run on its own workers.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace arbiter::net {

struct ListenAddress {
  std::string host;  // Empty: every interface. Without an IPv6 literal's brackets.
  int port = 0;      // 0: a free one.
};

// `listen_address` ("host:port", "[v6]:port", ":port") checked and resolved.
// INVALID_ARGUMENT naming `flag` ("<flag>: want host:port, got ...",
// "<flag>: cannot resolve ...").
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& listen_address,
                                                 absl::string_view flag);

class HttpListener {
 public:
  // Binds `http`, set up with its handlers, to `address` and runs its accept
  // loop; returns once the loop runs. UNAVAILABLE naming `flag` when the
  // address cannot be bound. REQUIRES: `http` outlives the listener.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(httplib::Server& http,
                                                             const ListenAddress& address,
                                                             absl::string_view flag);

  // Stops the server and joins the accept loop.
  ~HttpListener();

  // The port bound (the one picked, for port 0).
  int port() const { return port_; }

 private:
  explicit HttpListener(httplib::Server& http) : http_(http) {}

  httplib::Server& http_;
  std::thread loop_;
  std::atomic<bool> loop_done_{false};
  int port_ = 0;
};

}  // namespace arbiter::net
