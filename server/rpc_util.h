// The two shapes every unary handler takes:
//   - a read, run on the worker pool (never on a gRPC thread), and
//   - a command, run on the arbiter thread and answered after COMMIT.
// Both finish the reactor with the status mapped once by ToGrpcStatus.
#pragma once

#include <functional>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include "server/arbiter.h"
#include "server/worker_pool.h"

namespace arbiter::server {

// The actor recorded in the ledger for a call: its principal, or
// kUnidentifiedActor on a plaintext (development) server.
inline constexpr char kUnidentifiedActor[] = "unidentified";
std::string ActorOf(const grpc::ServerContextBase& ctx);

// Finishes at once with `status` (an error found before any work was queued).
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status,
                                     const char* method);

// Runs `read` on `pool`; it fills the response and returns the status.
grpc::ServerUnaryReactor* RunRead(grpc::CallbackServerContext* ctx, WorkerPool& pool,
                                  const char* method, std::function<absl::Status()> read);

// Submits `decide` to the arbiter. After the commit, `respond` (when set and
// the command succeeded) fills the response on the arbiter thread; it must
// not block.
grpc::ServerUnaryReactor* RunCommand(grpc::CallbackServerContext* ctx, Arbiter& arbiter,
                                     const char* method, Arbiter::Decide decide,
                                     std::function<absl::Status()> respond = nullptr);

}  // namespace arbiter::server
