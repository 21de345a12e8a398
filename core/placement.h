// Gang placement on real GPU geometry: whole GPUs (exclusive, all on one node
// per member) or a fraction of one shared GPU (milli-GPU plus memory MiB
// charged to that GPU alone, so free memory scattered over GPUs never counts
// as one block). Node CPU and memory bind too. All members are placed or none.
//
// Best fit: each member goes where it leaves the least capacity over, and
// fractions prefer GPUs that are already shared, so that empty GPUs stay
// whole for whole-GPU work. Deterministic: ties break on node id and GPU index.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

enum class FitResult {
  kPlaced,  // `placements` holds one entry per member, charged to `state`.
  kNotNow,  // Would fit on this pool if enough were released.
  kNever,   // No node of the pool could ever host the gang as asked.
};

struct GangPlacement {
  FitResult result = FitResult::kNever;
  std::vector<Placement> placements;
  std::string why;  // For kNotNow and kNever: which constraint failed.
};

// The time a placement is for: GPUs that an advance reservation holds for
// part of it are not used.
struct Window {
  absl::Time start = absl::InfinitePast();
  absl::Time end = absl::InfiniteFuture();
};

// Places `spec` in its pool for `window`. On kPlaced the placements are applied to `state`
// (ApplyPlacement); otherwise `state` is unchanged.
// REQUIRES: `spec` is valid and its pool exists.
GangPlacement PlaceGang(State& state, const CapacityRequestSpec& spec,
                        const Window& window = Window());

}  // namespace arbiter::core
