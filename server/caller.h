// The caller of a gRPC call, as the application's authorization sees it
// (app/authz.h): the principal and groups of its verified client certificate,
// or, for a call the console gateway (server/connect_gateway.h) makes on the
// in-process channel, those of the browser user's verified bearer token.
#pragma once

#include <string>
#include <vector>

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include "app/authz.h"

namespace arbiter::server {

// The caller of `ctx`. `insecure`: a plaintext loopback server
// (--insecure-loopback), whose callers may do everything; a call carrying the
// gateway's metadata is never insecure. A call whose gateway metadata is not
// vouched for by this process's secret has no principal (UNAUTHENTICATED).
app::Caller CallerOf(const grpc::ServerContextBase& ctx, bool insecure);

// Marks `ctx`, a call the gateway makes on the in-process channel, as made
// for `principal` and `groups`. The metadata carries a secret drawn once per
// process, which never leaves it: a caller on the network cannot forge it.
void ActAsCaller(grpc::ClientContext& ctx, const std::string& principal,
                 const std::vector<std::string>& groups);

}  // namespace arbiter::server
