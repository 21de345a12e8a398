// Pieces of arbitration shared by core's own files (arbitration.cc,
// claims.cc, nodes.cc). Not part of core's interface: callers outside core
// use core/arbitration.h.
//
// Thread-compatible, like State.
#pragma once

#include <string>

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

}  // namespace arbiter::core
