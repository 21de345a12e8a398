// Pieces of arbitration shared by core's own files (arbitration.cc,
// claims.cc, nodes.cc). Not part of core's interface: callers outside core
// use core/arbitration.h.
//
// Thread-compatible, like State.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

// NOT_FOUND "<field>: unknown <what> '<name>'".
absl::Status NotFound(absl::string_view field, absl::string_view what, absl::string_view name);

// Sets `request`'s state and its machine-readable and human explanation.
void SetOutcome(CapacityRequest& request, RequestState state, absl::string_view code,
                std::string reason);

// Settles the cost of `request`, which stops holding capacity at `end`: the
// projection charged at admission becomes the cost actually incurred.
void SettleCost(State& state, CapacityRequest& request, absl::Time end);

// Re-decides the queued requests of `pool` at `now`, recording what changes.
void AdmitQueued(State& state, const std::string& pool, absl::Time now, ChangeSet& changes);

// Books the occurrence of `started`'s recurrence after `started`'s own (a
// reservation, key "<series key>@<start, Unix seconds>"), unless the window
// has no more or it is booked already. Called when an occurrence starts.
// REQUIRES: started.spec.recurrence is set.
void BookNextOccurrence(State& state, const CapacityRequest& started, absl::Time now,
                        ChangeSet& changes);

// The seconds `victim` in `pool` gets to vacate: the spot grace for spot
// work, else the reclaim grace or its checkpoint time, whichever is longer.
int64_t GraceOf(const Pool& pool, const CapacityRequest& victim);

// Tells admitted `victim` of `pool` to vacate at its grace (GraceOf) for a
// reason of the arbiter's own (no request preempts it): PREEMPTING with
// `code`; returns the grace. The caller sets the reason's text and stores
// and records the request.
int64_t TellToVacate(const Pool& pool, CapacityRequest& victim, absl::string_view code,
                     absl::Time now);

// Pool admission (core/pool_admission.cc).

// Work on a SPOT pool is spot, and spot work is preemptible. INVALID_ARGUMENT
// (naming `guaranteed`) for guaranteed work on a SPOT pool.
absl::Status NormalizeSpot(const Pool& pool, CapacityRequestSpec& spec);
// A burst is asked of a pool that allows it, for a class it admits at
// `now`. INVALID_ARGUMENT naming `burst_seconds` otherwise.
absl::Status CheckBurst(const Pool& pool, const CapacityRequestSpec& spec, absl::Time now);
// Whether the pool's class-to-pool rules take `request`'s class at `at`
// (now, or a reservation's start); sets the denial otherwise:
// POOL_DOES_NOT_LEND for a denied class (naming the rule, and a lending
// window's next opening), NOT_PREEMPTIBLE for a borrowing class asked for
// without `preemptible`.
bool PoolAdmitsClass(const State& state, CapacityRequest& request, absl::Time at);
// Milli-GPU of each GPU model that `placements` take.
std::map<std::string, int64_t> MilliByModel(const State& state,
                                            const std::vector<Placement>& placements);
// Why work of `spec`, its placements applied to `state`, would take what
// `pool`'s serving forecast needs within its lead (core/proactive_reclaim.cc);
// "" when it leaves enough, or `spec` is of the pool's own classes.
std::string ForecastTaken(const State& state, const Pool& pool, const CapacityRequestSpec& spec,
                          absl::Time now);
// Why `placements` of `spec`, applied to `state`, eat into `pool`'s serving
// headroom; "" when they leave it free (or `spec` may take it at `now`).
std::string HeadroomTaken(const State& state, const Pool& pool, const CapacityRequestSpec& spec,
                          const std::vector<Placement>& placements, absl::Time now);
// Why `placements` of work in `pool` would exceed a watt budget, naming it
// and the shortfall; "" when they stay within every budget.
std::string PowerShortfall(const State& state, const std::string& pool,
                           const std::vector<Placement>& placements);
// Milli-GPU of `model` held by bursts in `pool`.
int64_t BurstingMilli(const State& state, const std::string& pool, const std::string& model);

}  // namespace arbiter::core
