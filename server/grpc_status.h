// The one place where absl::Status becomes a grpc::Status. Codes map 1:1
// (abseil's codes are the canonical gRPC codes). Messages of INTERNAL errors
// (which may carry SQL state or hostnames) are replaced by a generic text and
// logged once here, with the method name.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include <grpcpp/support/status.h>

namespace arbiter::server {

// Messages longer than this many bytes are cut (at a UTF-8 boundary) and
// marked: a message travels in a header, and gRPC refuses headers over
// 8 KiB (percent-encoding may triple a byte), so a refusal that quotes a
// huge value would otherwise reach the client as RESOURCE_EXHAUSTED.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

grpc::Status ToGrpcStatus(const absl::Status& status, absl::string_view method);

// The answer to a request body that does not parse as `method`'s request
// message ("/arbiter.v1.Service/Method"): INTERNAL, as gRPC's conventions
// give ("Error parsing request proto"), the same for every method, unary or
// streaming.
grpc::Status UnparsedBodyStatus(absl::string_view method);

}  // namespace arbiter::server
