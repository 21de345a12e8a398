// HttpsServer: a small HTTP/1.1-over-TLS server for arbiterd's Kubernetes
// admission webhook and its browser console (server/connect_gateway.h), on
// cpp-httplib (Debian's libcpp-httplib-dev 0.11.4, a
// shared library built with OpenSSL). What it guarantees:
//   - TLS 1.2 or later (OpenSSL), no TLS compression, no client certificate.
//   - A POST carries its body with a Content-Length of at most 4 MiB: a POST
//     without one (or chunked) gets 411, one over 4 MiB gets 413, before any
//     of the body is read; either reply says `Connection: close`. No request
//     of any method has more than 4 MiB of body read.
//   - Keep-alive, up to 100 requests per connection.
//   - A fixed set of worker threads, each serving one connection at a time;
//     connections beyond them wait their turn.
//   - A connection idle, or a peer silent mid-read or mid-write, for 10 s is
//     closed.
//   - A malformed request line gets 400; the handler sees only well-formed
//     requests.
// Not kept from the hand-written server it replaced: a 16 KiB cap on the
// request head. cpp-httplib 0.11.4 refuses a request line or header line over
// 8 KiB only once it has read it, and does not cap the number of header lines
// (upstream caps both from 0.22.0).
//
// Thread-safe. The handler is called on worker threads, concurrently.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "net/http_listener.h"

namespace httplib {
class SSLServer;
}  // namespace httplib

namespace arbiter::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "POST", "GET", ...
  std::string path;    // Without the query string, as sent (not percent-decoded).
  std::string body;
  HttpHeaders headers;  // Names in lower case, in the order sent.

  // The first value of header `name` (any case); empty when absent.
  std::string Header(absl::string_view name) const;
};

// Writes one part of a streamed body; false once the peer is gone (stop
// writing then).
using StreamWriter = std::function<bool(absl::string_view)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // Beside Content-Type and Content-Length.
  // When set, the body is streamed instead (chunked transfer coding): the
  // function is called once, on the worker serving the request, and writes
  // the body in parts until it returns. It holds that worker meanwhile.
  std::function<void(const StreamWriter&)> stream;
};

class HttpsServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Listens on `listen_address` (host:port; an empty host is every interface;
  // port 0 picks one) with the PEM certificate chain and key, and serves
  // `handler` on `threads` worker threads. INVALID_ARGUMENT naming the flag
  // (`<flag>-listen`, `<flag>-cert`, `<flag>-key`) when a file cannot be used
  // or the address is not host:port or does not resolve; UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpsServer>> Start(const std::string& listen_address,
                                                            const std::string& cert_file,
                                                            const std::string& key_file,
                                                            Handler handler, int threads = 4,
                                                            absl::string_view flag = "webhook");
  // Stops accepting, closes the listening socket and joins the workers
  // (connections being served finish their current request).
  ~HttpsServer();

  int port() const { return listener_->port(); }

 private:
  HttpsServer();

  std::unique_ptr<httplib::SSLServer> server_;
  // Declared after `server_`, so destroyed first: it stops the server.
  std::unique_ptr<net::HttpListener> listener_;
};

}  // namespace arbiter::server
