// An HTTP GET for scraping a dcgm-exporter endpoint on the node (plain HTTP,
// as the exporter serves it by default), on libcurl. No redirects, no TLS, no
// proxy (the exporter is local; `http_proxy` in the agent's environment is
// ignored), no compression.
//
// Thread-compatible.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace arbiter::agent {

// Fetches `url` ("http://host[:port][/path]"). Returns the body of a 200
// reply. INVALID_ARGUMENT for a URL of another shape; UNAVAILABLE when the
// host cannot be reached or the whole exchange does not finish within
// `timeout`; FAILED_PRECONDITION for a reply other than 200 (with its status
// line); RESOURCE_EXHAUSTED for a body over 64 MiB.
absl::StatusOr<std::string> HttpGet(const std::string& url, absl::Duration timeout);

}  // namespace arbiter::agent
