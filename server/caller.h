// The caller of a gRPC call, as the application's authorization sees it
// (app/authz.h): the principal and groups of its verified client certificate.
#pragma once

#include <string>

#include <grpcpp/server_context.h>

#include "app/authz.h"

namespace arbiter::server {

// The caller of `ctx`. `insecure`: a plaintext loopback server
// (--insecure-loopback), whose callers may do everything.
app::Caller CallerOf(const grpc::ServerContextBase& ctx, bool insecure);

}  // namespace arbiter::server
