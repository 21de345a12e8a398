// ConnectGateway: the arbiter.v1 services for browsers, over the Connect
// protocol (https://connectrpc.com/docs/protocol), and the console's static
// files, on arbiterd's console HTTPS port.
//
// It is not a second API. Each call is made, for the browser user, on the
// gRPC server's in-process channel: the same services, the same application
// layer, the same authorization (the bearer token's principal and groups,
// server/caller.h), idempotency and status codes as a gRPC client gets. Only
// the encoding differs: protobuf's canonical JSON mapping (or binary
// protobuf), converted by the method's descriptor, so a field added to a
// .proto is served here with no code.
//
// What it serves:
//   - POST /arbiter.v1.<Service>/<Method>, unary methods, Content-Type
//     application/json or application/proto. 200 with the reply; otherwise
//     the Connect error JSON {"code": "...", "message": "..."} with the
//     protocol's HTTP status for the code (invalid_argument 400,
//     unauthenticated 401, permission_denied 403, not_found 404, ...).
//   - The same path for server-streaming methods (the watch calls), with
//     Content-Type application/connect+json or application/connect+proto:
//     the request and each reply in an envelope (a flags byte and a 4-byte
//     big-endian length), ended by an end-of-stream envelope (flags 0x02)
//     carrying {} or {"error": {...}}. HTTP status 200 even for an error.
//   - Client-streaming methods (an agent's sample upload) are not served:
//     unimplemented.
//   - GET of any other path: the console's files from `assets_dir`
//     (index.html for a path that names no file, so that the console's own
//     routes load it), or 404 when no directory is configured.
//   - GET /healthz: "ok".
// Bodies in JSON that do not parse, name an unknown field or give a field
// the wrong type get invalid_argument naming the field, and nothing is
// called. A call without `Authorization: Bearer <token>`, or with a token
// the verifier refuses, gets unauthenticated and nothing is called.
//
// Thread-safe: Handle runs on the HTTPS server's workers concurrently. A
// stream holds its worker until it ends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include <google/protobuf/descriptor.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "core/clock.h"
#include "server/bearer_auth.h"
#include "server/https_server.h"

namespace arbiter::server {

struct ConnectGatewayOptions {
  // The console's built files (index.html and what it loads); empty: none.
  std::string assets_dir;
  // Streams open at once; beyond it, resource_exhausted. Keep it under the
  // HTTPS server's workers so that unary calls are still served.
  int max_streams = 24;
  // Streams open at once for one principal (its browser tabs).
  int max_streams_per_caller = 4;
  // A unary call's deadline when the client sends no Connect-Timeout-Ms.
  absl::Duration default_timeout = absl::Seconds(30);
};

class ConnectGateway {
 public:
  // `channel`: the gRPC server's in-process channel. `verifier`: the bearer
  // tokens' verifier; null when no sign-in is configured (every call is then
  // unauthenticated). `clock`: the time tokens are checked at. All three
  // must outlive the gateway.
  ConnectGateway(std::shared_ptr<grpc::Channel> channel, BearerVerifier* verifier, Clock* clock,
                 ConnectGatewayOptions options);

  HttpResponse Handle(const HttpRequest& request);

  // Ends every open stream and refuses new ones (unavailable). Call before
  // stopping the HTTPS server, whose workers the streams hold.
  void CancelStreams();

  // Streams open now.
  int open_streams() const;

 private:
  HttpResponse Unary(const HttpRequest& request, const std::string& method, bool json);
  HttpResponse ServerStream(const HttpRequest& request, const std::string& method, bool json);
  HttpResponse Asset(const std::string& path) const;
  // Counts `ctx` among the open streams of `principal`: UNAVAILABLE once
  // stopping, RESOURCE_EXHAUSTED at max_streams or max_streams_per_caller.
  grpc::Status Register(grpc::ClientContext* ctx, const std::string& principal);
  // Runs a registered stream to its end: the request, each reply in an
  // envelope through `write`, then the end of the stream (unless the client
  // is gone).
  void RunStream(grpc::ClientContext& ctx, const std::string& path, const std::string& wire,
                 const google::protobuf::Descriptor* output, bool json, const StreamWriter& write);

  std::shared_ptr<grpc::Channel> channel_;
  BearerVerifier* verifier_;
  Clock* clock_;
  const ConnectGatewayOptions options_;

  mutable absl::Mutex mu_;
  // Open streams, with the principal each runs for.
  std::map<grpc::ClientContext*, std::string> streams_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// The Connect protocol's name for a gRPC status code ("invalid_argument"),
// and the HTTP status it maps to for a unary call.
const char* ConnectCodeName(int grpc_code);
int ConnectHttpStatus(int grpc_code);

}  // namespace arbiter::server
