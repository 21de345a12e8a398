// Claims and leases: the enforcer's side of an admitted allocation
// (docs/enforcement.md). Declared in core/arbitration.h; the allocations
// that end unclaimed or with an expired lease end in Tick (arbitration.cc).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "core/arbitration.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

// Live request `id` in a state that may be claimed; the status a claim or a
// renewal of it gets otherwise.
absl::StatusOr<const CapacityRequest*> Claimable(const State& state, int64_t id) {
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", id));
  if (id >= state.next_request_id())
    return absl::NotFoundError(absl::StrCat("id: no request ", id));
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("id: request ", id, " has ended; it holds nothing to claim"));
  }
  if (live->state != RequestState::kAdmitted) {
    return absl::FailedPreconditionError(absl::StrCat("id: request ", id, " is ",
                                                      RequestStateName(live->state),
                                                      "; only an admitted allocation is claimed"));
  }
  return live;
}

// Live request `id` whose leases may be renewed: admitted, or preempting
// before its deadline (its enforcer is stopping it; past the deadline only
// a release confirms it).
absl::StatusOr<const CapacityRequest*> Renewable(const State& state, int64_t id, absl::Time now) {
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live != nullptr && live->state == RequestState::kPreempting) {
    if (now > live->preempt_deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("id: request ", id, " was to vacate by ",
                       absl::FormatTime(live->preempt_deadline, absl::UTCTimeZone()),
                       "; release it to confirm that it has stopped"));
    }
    return live;
  }
  return Claimable(state, id);
}

const Claim* ClaimOf(const CapacityRequest& r, int32_t member) {
  for (const Claim& c : r.claims) {
    if (c.member == member) return &c;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<CapacityRequest> ClaimAllocation(State& state, int64_t id, const std::string& holder,
                                                const std::vector<int32_t>& members, absl::Time now,
                                                ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateHolder("holder", holder));
  ARBITER_ASSIGN_OR_RETURN(const CapacityRequest* live, Claimable(state, id));
  std::vector<int32_t> wanted = members;
  if (wanted.empty()) {
    for (int32_t m = 0; m < live->spec.members; ++m) wanted.push_back(m);
  }
  std::set<int32_t> seen;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const int32_t m = wanted[i];
    if (m < 0 || m >= live->spec.members) {
      return absl::InvalidArgumentError(
          absl::StrCat("members[", i, "]: must be in 0..", live->spec.members - 1, ", got ", m));
    }
    if (!seen.insert(m).second) {
      return absl::InvalidArgumentError(absl::StrCat("members[", i, "]: ", m, " is given twice"));
    }
    const Claim* held = ClaimOf(*live, m);
    if (held != nullptr && held->holder != holder) {
      return absl::FailedPreconditionError(absl::StrCat(
          "members[", i, "]: member ", m, " of request ", id, " is claimed by ", held->holder));
    }
  }
  CapacityRequest request = *live;
  bool claimed = false;
  for (int32_t m : wanted) {
    auto it = std::find_if(request.claims.begin(), request.claims.end(),
                           [m](const Claim& c) { return c.member == m; });
    if (it != request.claims.end()) {
      it->renewed_at = now;  // The same holder again: a renewal.
    } else {
      request.claims.push_back(Claim{m, holder, now, now});
      claimed = true;
    }
  }
  std::sort(request.claims.begin(), request.claims.end(),
            [](const Claim& a, const Claim& b) { return a.member < b.member; });
  if (claimed) request.updated_at = now;
  state.PutRequest(request);
  if (claimed) changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
  return *state.FindLiveRequest(id);
}

absl::StatusOr<CapacityRequest> RenewLease(State& state, int64_t id, const std::string& holder,
                                           absl::Time now) {
  ARBITER_RETURN_IF_ERROR(ValidateHolder("holder", holder));
  ARBITER_ASSIGN_OR_RETURN(const CapacityRequest* live, Renewable(state, id, now));
  CapacityRequest request = *live;
  bool renewed = false;
  for (Claim& c : request.claims) {
    if (c.holder != holder) continue;
    c.renewed_at = now;
    renewed = true;
  }
  if (!renewed) {
    std::vector<std::string> holders;
    for (const Claim& c : request.claims) holders.push_back(c.holder);
    return absl::FailedPreconditionError(absl::StrCat(
        "holder: ", holder, " holds no claim on request ", id,
        holders.empty() ? std::string(" (nobody has claimed it)")
                        : absl::StrCat(" (held by ", absl::StrJoin(holders, ", "), ")")));
  }
  state.PutRequest(request);
  return *state.FindLiveRequest(id);
}

void GraceLeases(State& state, absl::Time now) {
  std::vector<CapacityRequest> renewed;
  for (const auto& [id, r] : state.live_requests()) {
    if (r.claims.empty() || r.enforce_at == absl::InfiniteFuture()) continue;
    CapacityRequest copy = r;
    for (Claim& c : copy.claims) c.renewed_at = std::max(c.renewed_at, now);
    renewed.push_back(std::move(copy));
  }
  for (const CapacityRequest& r : renewed) state.PutRequest(r);
}

}  // namespace arbiter::core
