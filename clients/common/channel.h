// The channel to arbiterd that the agents and controllers open: mutual TLS
// from three PEM files, or plaintext (a loopback arbiterd started with
// --insecure-loopback) when none is given.
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include <grpcpp/channel.h>

namespace arbiter::clients {

struct ChannelFiles {
  std::string ca_file;    // CA that signed arbiterd's certificate.
  std::string cert_file;  // This client's certificate.
  std::string key_file;   // Its private key.
};

// A channel to `endpoint` (host:port). INVALID_ARGUMENT naming the flags
// when some of the files are given and not all of them can be read.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& endpoint,
                                                           const ChannelFiles& files);

}  // namespace arbiter::clients
