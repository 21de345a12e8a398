// Running Slurm's commands (squeue, scontrol, scancel, sacctmgr) without a
// shell: argv as given, standard output captured, a deadline.
//
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace arbiter::slurm {

// Runs `argv` (argv[0] looked up in PATH) and returns its standard output.
// UNAVAILABLE with the command and its standard error when it exits
// non-zero or cannot start; DEADLINE_EXCEEDED (the process killed) when it
// runs past `timeout`.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       absl::Duration timeout = absl::Seconds(30));

}  // namespace arbiter::slurm
