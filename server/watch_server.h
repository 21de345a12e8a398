// WatchServer: serves AllocationService.WatchAllocations on gRPC's
// asynchronous API, on completion queues of its own, each drained by one
// thread; the other methods stay on the callback API.
//
// Why its own queues: Debian's gRPC is built without NDEBUG, and each
// completion on a queue then scans every operation still pending on that
// queue. On the callback API every call shares the server's one callback
// queue, where each open watch stream keeps an operation pending for its
// whole life: with 10,000 streams open, every unary call's completions
// scanned 10,000 entries (bench/watch-fanout). Here the unary calls never
// see the streams, and the streams are spread over the watch queues.
//
// A stream: the request (a WatchAllocationsRequest's bytes) is checked
// (authorization, then the filter: INVALID_ARGUMENT naming the field) and
// subscribed to the hub; batches arrive encoded once and are written as
// they are: one event per message, or, for a batched stream, every waiting
// batch in one message (up to 1 MiB) made of slices of the batches' shared
// bytes, without a copy. A batched stream starts a write at most once per
// app::WatchOptions::batch_every. A stream 10,000 events behind is ended
// RESOURCE_EXHAUSTED (resume from the last revision).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include <grpcpp/server_builder.h>

#include "server/services.h"

namespace arbiter::server {

class WatchServer {
 public:
  // Adds `queues` completion queues to `builder`. REQUIRES: before
  // builder.BuildAndStart(); `service` is registered with `builder`, and it
  // and `ctx.app` outlive Stop().
  WatchServer(grpc::ServerBuilder& builder, AllocationService* service, ServiceContext ctx,
              int queues);
  // Stop(), if not stopped yet.
  ~WatchServer();

  // Starts taking calls, a thread per queue. REQUIRES: after the server's
  // BuildAndStart; once.
  void Start();
  // Waits for every call to be gone (at most 30 s), then shuts the queues
  // down and joins the threads. REQUIRES: after grpc::Server::Shutdown,
  // which ends the calls. Idempotent.
  void Stop();

  // Waits for the next call on `cq`, unless stopping. For WatchCall.
  void Request(grpc::ServerCompletionQueue* cq) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `start`, which starts an operation on a watch queue (a write, a
  // finish, an alarm), unless the queues are shutting down; returns whether
  // it ran. Stop shuts the queues down only after every `start` under way
  // has returned: an operation started on a queue that is shut down aborts
  // the process (gRPC asserts it), and the hub may deliver to a stream
  // between the server's Shutdown and the stream's done tag. For WatchCall.
  bool StartOp(absl::FunctionRef<void()> start) ABSL_LOCKS_EXCLUDED(mu_);
  // A call made by Request has deleted itself. For WatchCall.
  void CallEnded() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Drain(grpc::ServerCompletionQueue* cq);

  AllocationService* const service_;
  const ServiceContext ctx_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;  // Made by Request, not yet deleted.
};

// The wire bytes of a watch event, made once for every stream
// (app::WatchOptions::encode): an `events` entry of WatchAllocationsResponse
// (field 5, the length, an AllocationEvent). Past the tag and the length the
// bytes are also a WatchAllocationsResponse with the event in its top-level
// fields, since AllocationEvent numbers its fields the same way.
std::string EncodeWatchEvent(const app::AllocationEvent& event, const app::NodeDirectory& nodes);

}  // namespace arbiter::server
