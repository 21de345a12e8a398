// Backfill planning for the head of a pool's queue: when the head would
// start if every request holding the pool's capacity ended at its known end
// (an admitted request's declared end, a preempted one's deadline), and the
// GPUs it would take then. AdmitQueued (core/arbitration.cc) holds those
// GPUs for the head from its planned start, so that work admitted behind it
// either ends before then or runs elsewhere: it never delays the head.
//
// Thread-compatible.
#pragma once

#include <vector>

#include "absl/time/time.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

struct HeadPlan {
  // The known end after which the head fits. InfiniteFuture when the known
  // ends do not free enough: the head then waits for the GPUs in `claim` to
  // drain of open-ended work.
  absl::Time start = absl::InfiniteFuture();
  // The GPUs the head would take (whole GPUs: for a fraction or a MIG
  // instance, the GPU it lands on). Empty when the head does not fit the
  // pool even with everything in it released.
  std::vector<GpuHold> claim;
};

// Plans `head`, which waits for capacity in its pool at `now`. A `hint`
// (a start planned before; InfiniteFuture: none) is tried first. Then the
// known ends are searched in order (binary search: fitting only gets easier
// as more ends pass); without a known end that suffices, every holder of
// the pool is taken away and the head is placed from now. `state` is as it
// was on return.
// REQUIRES: `head` is queued, holds nothing and its pool exists.
HeadPlan PlanHead(State& state, const CapacityRequest& head, absl::Time now,
                  absl::Time hint = absl::InfiniteFuture());

// The known end of live request `r`, which holds capacity: its preemption
// deadline while PREEMPTING, its declared end while ADMITTED; InfiniteFuture
// when it has none or has run past it (`now`).
absl::Time KnownEnd(const CapacityRequest& r, absl::Time now);

// Whether `head` would fit its pool at `at` if every holder of the pool
// whose known end (passed or not) is at or before `at` were gone. The rule
// that backfill keeps (tests check it after every event): nothing admitted
// behind the head moves this answer for its planned start from true to
// false. `state` is as it was on return.
bool FitsAt(State& state, const CapacityRequest& head, absl::Time at);

}  // namespace arbiter::core
