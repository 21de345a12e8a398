// Runs the real `arbiterd` binary for integration tests: serve on a free
// loopback port against a test database, kill it, restart it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include <sys/types.h>

namespace arbiter::testing {

// Path of a built binary under ARBITER_BINARY_DIR, by default the build
// directory this harness was compiled in.
std::string BinaryPath(const std::string& relative);

class ArbiterdProcess {
 public:
  // Starts `arbiterd serve` and waits (up to 60 s) until it serves.
  static absl::StatusOr<std::unique_ptr<ArbiterdProcess>> Start(
      const std::string& dsn, const std::vector<std::string>& extra_args = {});
  // Stops the process (SIGTERM, then SIGKILL) if still running.
  ~ArbiterdProcess();

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // Sends SIGKILL and reaps the process.
  void Kill();
  // Sends SIGTERM and waits; returns the exit status.
  int Stop();

 private:
  ArbiterdProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

}  // namespace arbiter::testing
