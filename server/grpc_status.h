// The one place where absl::Status becomes a grpc::Status. Codes map 1:1
// (abseil's codes are the canonical gRPC codes). Messages of INTERNAL errors
// (which may carry SQL state or hostnames) are replaced by a generic text and
// logged once here, with the method name.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include <grpcpp/support/status.h>

namespace arbiter::server {

grpc::Status ToGrpcStatus(const absl::Status& status, absl::string_view method);

}  // namespace arbiter::server
