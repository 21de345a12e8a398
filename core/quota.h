// Quota accounting: which quota ("flavor") a request may be charged to, and
// whether a charge fits a team's limits and its cohort's lending.
//
// A team's quotas in a pool are per GPU model, plus one pool-wide quota for
// every model without its own. A request is tried against each in turn
// (per-model first) and is placed only on the models of the one it is
// charged to. Cohort rules (see Quota in core/model.h): the teams under one
// root team share what they lend; a team may use up to nominal + borrowing
// limit, and the cohort's use beyond what its teams keep for themselves
// never exceeds what they lend.
//
// Pure functions over `State`; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

// A quota a request may be charged to, and the GPU models it covers for it.
struct Flavor {
  const Quota* quota = nullptr;
  // The request's allowed models narrowed to this quota; empty means "every
  // model" (a pool-wide quota when the team has no per-model ones).
  std::vector<std::string> gpu_models;
};

// The flavors of `spec` in order: per-model quotas by model name, then the
// pool-wide one. Flavors that cover none of the allowed models are left out.
std::vector<Flavor> FlavorsOf(const State& state, const CapacityRequestSpec& spec);

struct QuotaCheck {
  bool ok = false;
  // The request is larger than the quota could ever allow.
  bool never = false;
  // Admitting it takes the team beyond its nominal quota.
  bool borrowing = false;
  std::string reason_code;
  std::string reason;
};

// Whether charging `need` milli-GPU of `spec` to `quota` fits now.
QuotaCheck CheckQuota(const State& state, const CapacityRequestSpec& spec, const Quota& quota,
                      int64_t need);

// Whether `need` more for `spec`'s team stays within its nominal quota.
bool WithinNominal(const State& state, const CapacityRequestSpec& spec, const Quota& quota,
                   int64_t need);

// The team's fair share in `pool`, one level per subtree on its path: for
// each subtree below the root, root side first, its use beyond what its
// teams lend over what its parent's subtree pools, divided by the weight of
// the team heading it, in millionths (0 while within); then, for a team
// that heads a subtree (a root, or a team with children), its own use
// beyond nominal over what its subtree pools. Compared lexicographically,
// lower first: siblings compete by their subtrees' shares at every level,
// as hierarchical fair sharing does. In a flat cohort it is one number: the
// team's use beyond nominal over what the cohort lends, per weight.
using FairShare = absl::InlinedVector<int64_t, 4>;
FairShare DominantShare(const State& state, const std::string& team, const std::string& pool);
// The team's measured usage (State::MeasuredUsage) divided by its weight:
// among teams of equal dominant share, the one that used less goes first.
int64_t MeasuredShare(const State& state, const std::string& team);

}  // namespace arbiter::core
