// Victim selection for preemption and reclaim.
//
// Who may be a victim of request R (team T, pool P), all of them admitted,
// preemptible and not guaranteed:
//   - work of T in P with a lower priority than R;
//   - reclaim: work of another team of T's cohort charged to the same quota
//     flavor while that team is beyond its nominal quota, when R stays within
//     T's nominal quota;
//   - spot work, of any team, when R is not spot;
//   - the pool's own classes (ADMIT in its class rules) take back capacity
//     lent to borrowing classes (BORROW), e.g. inference on a SERVING pool;
//   - a reservation that starts takes back GPUs from work past its declared
//     end (backfilled work that overran), preemptible or not.
// A spot R preempts nothing. Spot victims are taken first, then the rest
// cheapest first by lost work (GPU milli x (seconds since
// the last checkpoint + checkpoint/restore seconds)) until R fits, then any
// victim R can do without is put back, so that no more is freed than needed.
//
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

#include "core/model.h"
#include "core/placement.h"
#include "core/quota.h"
#include "core/state.h"

namespace arbiter::core {

// GPU milli-seconds of work `victim` loses if preempted at `now`.
int64_t LostWork(const CapacityRequest& victim, absl::Time now);

struct PreemptionPlan {
  // Victims in the order chosen; empty when no set of eligible victims would
  // let the request in.
  std::vector<int64_t> victims;
  // The GPUs the request would take once they are gone.
  std::vector<GpuHold> claim;
};

// The victims whose removal lets `request` be charged to `flavor` and placed
// in `window`.
PreemptionPlan ChooseVictims(const State& state, const CapacityRequest& request,
                             const Flavor& flavor, const Window& window, absl::Time now);

}  // namespace arbiter::core
