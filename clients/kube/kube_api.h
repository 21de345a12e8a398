// A client of the Kubernetes API server's REST protocol, on libcurl: JSON
// requests, and watches read as a stream of newline-delimited events.
// In a pod it finds the API server, its CA and the service account's token
// where Kubernetes mounts them (KubeApiOptions::InCluster).
//
// Thread-safe: every call uses its own connection.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace arbiter::kube {

struct KubeApiOptions {
  // "https://host:port" or "http://host:port" (tests), without a path.
  std::string server;
  // The bearer token's file (re-read at each request: the kubelet rotates
  // projected tokens); empty for none.
  std::string token_file;
  // PEM CA bundle that signed the API server's certificate; empty: the
  // system's.
  std::string ca_file;
  // A request other than a watch gives up after this long.
  absl::Duration timeout = absl::Seconds(30);

  // The in-cluster configuration: KUBERNETES_SERVICE_HOST/PORT and the
  // service account's token and CA. FAILED_PRECONDITION outside a pod.
  static absl::StatusOr<KubeApiOptions> InCluster();
};

struct KubeReply {
  long code = 0;  // The HTTP status.
  std::string body;
};

class KubeApi {
 public:
  explicit KubeApi(KubeApiOptions options);

  // One request. `path` starts with "/" and may carry a query. Returns the
  // reply whatever its HTTP status; UNAVAILABLE when there was none (the
  // server unreachable, the timeout passed).
  absl::StatusOr<KubeReply> Call(const std::string& method, const std::string& path,
                                 const std::string& body = "",
                                 const std::string& content_type = "application/json") const;

  // A watch: GET `path` (with watch=1 and the resourceVersion in its
  // query) and hand each complete line of the streamed body to `on_line`.
  // Returns when the server ends the stream (OK), `on_line` returns false
  // or `stop` is set (CANCELLED, checked at least once a second), the reply
  // is not 200 (FAILED_PRECONDITION with the status and body), or the
  // connection fails (UNAVAILABLE).
  absl::Status Watch(const std::string& path,
                     const std::function<bool(const std::string&)>& on_line,
                     const std::atomic<bool>& stop) const;

  const std::string& server() const { return options_.server; }

 private:
  KubeApiOptions options_;
};

// "%2F"-style escaping of one query parameter's value.
std::string QueryEscape(const std::string& value);

}  // namespace arbiter::kube
