// Arbiter's quotas as Slurm association limits (docs/slurm.md, "Quotas in
// Slurm"): each team's account gets GrpTRES equal to what Arbiter could
// ever let it hold in the cluster's pools, so that Slurm refuses to start
// more even if a job got past the hold. No I/O.
//
// Thread-safe (free functions on values).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace arbiter::slurm {

struct QuotaLine {
  std::string team;
  std::string pool;
  std::string gpu_model;  // Empty: the pool-wide quota.
  int64_t nominal_milli = 0;
  std::optional<int64_t> borrowing_limit_milli;  // Unset: 0; -1: no limit.
};

// TRES name ("gres/gpu", "gres/gpu:h100") -> whole GPUs, or -1 for no limit.
using TresLimits = std::map<std::string, int64_t>;

// Each team's limits over `pools` (the pools the cluster's partitions are):
// per GPU model (named by its Slurm type through `model_types`; a model with
// no type is left out) and pool-wide ("gres/gpu"), each the sum of nominal
// plus borrowing limit over the pools, rounded up to whole GPUs; -1 when any
// of them may borrow without limit.
std::map<std::string, TresLimits> GrpTresFor(const std::vector<QuotaLine>& quotas,
                                             const std::set<std::string>& pools,
                                             const std::map<std::string, std::string>& model_types);

// "gres/gpu:h100=6,gres/gpu=4" (as sacctmgr prints GrpTRES) parsed; items
// that are not name=number are skipped.
TresLimits ParseTres(const std::string& text);

// The GrpTRES value that turns `current` into `wanted` ("" when they are
// equal): wanted's limits, and -1 (cleared) for the GPU limits `current`
// has and `wanted` has not. Other TRES (cpu, mem) are left alone.
std::string TresChange(const TresLimits& current, const TresLimits& wanted);

}  // namespace arbiter::slurm
