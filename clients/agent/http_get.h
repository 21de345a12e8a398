// HTTP GETs for the agent's sources, on libcurl: `HttpGet` scrapes a
// dcgm-exporter endpoint on the node (plain HTTP, as the exporter serves it
// by default); `HttpFetch` also speaks HTTPS (a CA file, a client
// certificate) with a bearer token or basic auth, and returns replies of any
// status, for a Prometheus server's API. No redirects, no proxy (an
// `http_proxy` in the agent's environment is ignored), no compression.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace arbiter::agent {

// How `HttpFetch` connects and authenticates.
struct HttpOptions {
  // The Accept header. Default: "text/plain".
  std::string accept = "text/plain";
  // Allow https:// URLs as well as http://. Default: false.
  bool allow_https = false;
  // HTTPS: the CA certificates (PEM) that verify the server. Default: "",
  // the system's CAs.
  std::string ca_file;
  // HTTPS: this client's certificate and private key (PEM), both or none.
  // Default: none.
  std::string cert_file;
  std::string key_file;
  // "Authorization: Bearer <token>" when not empty. Default: "".
  std::string bearer_token;
  // Basic authentication when `basic_user` is not empty. Default: "".
  std::string basic_user;
  std::string basic_password;
};

// A reply, whatever its status.
struct HttpReply {
  int32_t code = 0;         // 200, 404, ...
  std::string status_line;  // "HTTP/1.1 404 Not Found".
  std::string body;
};

// Fetches `url` ("http://host[:port][/path][?query]", or "https://..."
// when `options.allow_https`). Returns the reply of any status.
// INVALID_ARGUMENT for a URL of another shape, or a CA, certificate or key
// file that cannot be used; UNAVAILABLE when the host cannot be reached or
// the TLS handshake fails (an unverified server, a refused client
// certificate); DEADLINE_EXCEEDED when the whole exchange does not finish
// within `timeout` (a positive duration; otherwise no limit);
// RESOURCE_EXHAUSTED for a body over 64 MiB. Messages name the URL, never a
// credential.
absl::StatusOr<HttpReply> HttpFetch(const std::string& url, absl::Duration timeout,
                                    const HttpOptions& options);

// Fetches `url` ("http://host[:port][/path]"). Returns the body of a 200
// reply. INVALID_ARGUMENT for a URL of another shape; UNAVAILABLE when the
// host cannot be reached or the whole exchange does not finish within
// `timeout`; FAILED_PRECONDITION for a reply other than 200 (with its status
// line); RESOURCE_EXHAUSTED for a body over 64 MiB.
absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout);

}  // namespace arbiter::agent
