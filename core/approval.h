// Declared authority: which approvals a request needs before it is decided,
// and who may give them (AuthorityRule in core/model.h).
//
// Pure functions over `State`; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

struct ApprovalNeed {
  ApprovalAction action = ApprovalAction::kUnspecified;
  // Subjects that may give it (principals or "group:NAME"); empty when
  // nobody may, which denies the request.
  std::vector<std::string> approvers;
};

// The approvals `request` still needs: guaranteed work always; large
// requests and borrowing where a rule of the pool (or org-wide) says so;
// going beyond the hard budget limit when the team's budget asks for
// approval. `borrowing`: whether admitting it now would take its team beyond
// nominal; `over_budget`: whether it would take it beyond its hard limit.
// `now` prices the request for approvers' money limits.
std::vector<ApprovalNeed> ApprovalsNeeded(const State& state, const CapacityRequest& request,
                                          bool borrowing, bool over_budget, absl::Time now);

// Whether `who` may approve `action` for `request` under some rule: named
// by it (or by one of `who`'s groups), or holding a delegation, unexpired at
// `now`, from a principal it names.
bool MayApprove(const State& state, const CapacityRequest& request, ApprovalAction action,
                const Approver& who, absl::Time now);

}  // namespace arbiter::core
