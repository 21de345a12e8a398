// HttpsServer: a small HTTP/1.1-over-TLS server for arbiterd's Kubernetes
// admission webhook. POST with a Content-Length body (at most 4 MiB), keep-
// alive, TLS 1.2 or later (OpenSSL), a fixed set of worker threads that
// each accept and serve one connection at a time. Idle or slow connections
// are closed after 10 s.
//
// Thread-safe. The handler is called on worker threads, concurrently.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace arbiter::server {

struct HttpRequest {
  std::string method;  // "POST", "GET", ...
  std::string path;    // Without the query string.
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class HttpsServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Listens on `listen_address` (host:port; port 0 picks one) with the PEM
  // certificate chain and key. INVALID_ARGUMENT naming the flag when a file
  // cannot be used; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpsServer>> Start(const std::string& listen_address,
                                                            const std::string& cert_file,
                                                            const std::string& key_file,
                                                            Handler handler, int threads = 4);
  // Stops accepting, closes the listening socket and joins the workers
  // (connections being served finish their current request).
  ~HttpsServer();

  int port() const { return port_; }

 private:
  HttpsServer() = default;
  void Work();
  void Serve(int fd);

  Handler handler_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX*, kept out of this header.
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace arbiter::server
