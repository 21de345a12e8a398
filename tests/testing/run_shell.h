// Runs a shell command in a test and keeps what it printed: for tests that
// run arbiterd's and arbctl's command lines as an operator would.
#pragma once

#include <string>

#include <stdio.h>
#include <sys/wait.h>

namespace arbiter::testing {

struct CommandResult {
  int exit_code = -1;  // -1: it could not be run, or a signal ended it.
  std::string output;  // stdout and stderr.
};

// Runs `command` through /bin/sh, with stderr joined to stdout.
inline CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace arbiter::testing
