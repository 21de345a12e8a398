// Slurm's jobs as arbiter-slurm reads them (docs/slurm.md): `squeue --json`
// parsed into the fields the bridge decides on, and Slurm's host lists.
// No I/O.
//
// Thread-safe (free functions on values).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace arbiter::slurm {

// What a job asks of GPUs per node, from its TRES string
// ("gres:gpu:h100:2", "gres/gpu:h100=2", "gres:gpu:2").
struct GpuAsk {
  bool any = false;      // The job asks for GPUs.
  std::string type;      // Empty: any type.
  int32_t per_node = 0;  // GPUs on each of its nodes.
};
// INVALID_ARGUMENT naming the string for a GPU item that does not parse.
absl::StatusOr<GpuAsk> ParseGpuTres(absl::string_view tres);

// "n[1-3,7],gpu-a" -> n1 n2 n3 n7 gpu-a. INVALID_ARGUMENT for a malformed
// list (unbalanced brackets, a reversed or non-numeric range).
absl::StatusOr<std::vector<std::string>> ExpandHostList(absl::string_view list);

// The admin comment arbiter-slurm writes on a job it asked Arbiter for:
// "arbiter:request=<id>;restart=<n>". Slurm keeps it, so a restarted bridge
// finds the request of every job without any store of its own.
std::string AdminCommentFor(int64_t request, int32_t restart_count);
// The request recorded for the job's current run (`restart_count`); 0 when
// none (not Arbiter's comment, or one from before a requeue).
int64_t RequestIn(absl::string_view admin_comment, int32_t restart_count);

struct SlurmJob {
  int64_t id = 0;
  std::string name;
  std::string user;
  std::string state;   // PENDING, RUNNING, COMPLETED, CANCELLED, ...
  std::string reason;  // state_reason: JobHeldAdmin, JobHeldUser, None, ...
  bool held = false;   // Priority 0.
  std::string account;
  std::string partition;
  std::string qos;
  int32_t nodes = 1;  // node_count.
  GpuAsk gpus;
  // Asks for GPUs other than per node (--gpus, --gpus-per-task): the
  // job_submit plugin refuses these; a job that slipped through is refused.
  bool gpus_not_per_node = false;
  std::string comment;
  std::string admin_comment;
  int32_t restart_count = 0;
  bool requeue = false;                // May be requeued.
  int64_t time_limit_minutes = 0;      // 0: none.
  std::vector<std::string> node_list;  // Where it runs (running jobs).
  // When its current (or last) run started and ended, in Unix seconds as
  // Slurm records them (sacct's Start and End); 0 when not yet.
  int64_t start_time = 0;
  int64_t end_time = 0;

  // Running, or about to (CONFIGURING), or ending (COMPLETING): its
  // allocation is in use.
  bool Active() const;
  // Ended: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED,
  // OUT_OF_MEMORY, BOOT_FAIL, DEADLINE.
  bool Ended() const;
  bool Pending() const { return state == "PENDING"; }
};

// The jobs of `squeue --json` (Slurm 22.05's schema). INVALID_ARGUMENT
// naming the job and field for a malformed document or job.
absl::StatusOr<std::vector<SlurmJob>> ParseSqueueJson(absl::string_view text);

}  // namespace arbiter::slurm
