// arbiterd's log format: plain text for people, or one JSON object per line
// for log pipelines:
//   {"ts":"2026-11-22T10:00:00.123+0000","level":"info","logger":"arbiterd","msg":"..."}
// RPCs that fail are logged with their request id (server/metrics.cc), which
// callers also receive as the x-request-id response header.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace arbiter::server {

// `format`: "text" or "json". INVALID_ARGUMENT naming --log-format otherwise.
absl::Status ConfigureLogging(const std::string& format);

}  // namespace arbiter::server
