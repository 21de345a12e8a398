// The channel to arbiterd that the agents and controllers open: mutual TLS
// from three PEM files, or plaintext (a loopback arbiterd started with
// --insecure-loopback) when none is given.
//
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

namespace arbiter::clients {

struct ChannelFiles {
  std::string ca_file;    // CA that signed arbiterd's certificate.
  std::string cert_file;  // This client's certificate.
  std::string key_file;   // Its private key.
};

// A channel to `endpoint` (host:port), with keepalive pings so that a
// stream to a replica that died silently ends. INVALID_ARGUMENT naming the
// flags when some of the files are given and not all of them can be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& endpoint,
                                                           const ChannelFiles& files);

// A gRPC status as an absl::Status (the same code and message).
absl::Status StatusOf(const grpc::Status& status);

// A context for one unary call of a long-running client: a 10 s deadline.
std::unique_ptr<grpc::ClientContext> Context();

// The leader's address that a follower's refusal names (UNAVAILABLE
// "... retry at leader=HOST:PORT"); "" for any other status.
std::string LeaderNamedIn(const grpc::Status& status);

// A channel that follows arbiterd's leader: a follower refuses decisions
// and watches, naming the leader, and Follow re-dials there. Long-running
// clients (arbiter-kube) take Get() for each call.
//
// Thread-safe.
class LeaderChannel {
 public:
  // `first`: the channel to `endpoint` (OpenChannel), which the files made.
  LeaderChannel(std::string endpoint, ChannelFiles files, std::shared_ptr<grpc::Channel> first);

  std::shared_ptr<grpc::Channel> Get() const;
  // Re-dials to the leader `status` names, if it names one other than the
  // current address. Returns whether it did.
  bool Follow(const grpc::Status& status);
  // The address of the current channel.
  std::string address() const;

 private:
  const ChannelFiles files_;
  mutable std::mutex mu_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace arbiter::clients
