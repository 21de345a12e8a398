#include "core/approval.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace arbiter::core {
namespace {

bool Given(const CapacityRequest& request, ApprovalAction action) {
  const std::string prefix = absl::StrCat(ApprovalActionName(action), ":");
  return std::any_of(request.approvals.begin(), request.approvals.end(),
                     [&](const std::string& a) { return absl::StartsWith(a, prefix); });
}

// Whether `rule` governs `action` for `request` (pool and, for guaranteed
// work, org-wide only), and its limit covers the request's size.
bool Covers(const AuthorityRule& rule, const CapacityRequest& request, ApprovalAction action) {
  if (rule.action != action) return false;
  if (action == ApprovalAction::kGuaranteed) {
    if (!rule.pool.empty()) return false;
  } else if (!rule.pool.empty() && rule.pool != request.spec.pool) {
    return false;
  }
  return rule.limit_milli == kUnlimited || request.spec.total_gpu_milli() <= rule.limit_milli;
}

// Whether some rule of the pool (or org-wide) puts `action` under approval
// for `request`.
bool Governed(const State& state, const CapacityRequest& request, ApprovalAction action) {
  for (const AuthorityRule& r : state.authority_rules()) {
    if (r.action != action || (!r.pool.empty() && r.pool != request.spec.pool)) continue;
    if (action != ApprovalAction::kLarge || request.spec.total_gpu_milli() > r.threshold_milli) {
      return true;
    }
  }
  return false;
}

bool IsSubject(const std::string& subject, const Approver& who) {
  if (subject == who.principal) return true;
  absl::string_view group = subject;
  return absl::ConsumePrefix(&group, "group:") &&
         std::find(who.groups.begin(), who.groups.end(), group) != who.groups.end();
}

}  // namespace

std::vector<ApprovalNeed> ApprovalsNeeded(const State& state, const CapacityRequest& request,
                                          bool borrowing, bool over_budget) {
  std::vector<ApprovalAction> actions;
  if (over_budget) actions.push_back(ApprovalAction::kOverBudget);
  if (request.spec.guaranteed) actions.push_back(ApprovalAction::kGuaranteed);
  if (Governed(state, request, ApprovalAction::kLarge)) actions.push_back(ApprovalAction::kLarge);
  if (borrowing && Governed(state, request, ApprovalAction::kBorrow)) {
    actions.push_back(ApprovalAction::kBorrow);
  }
  std::vector<ApprovalNeed> needs;
  for (ApprovalAction action : actions) {
    if (Given(request, action)) continue;
    ApprovalNeed need{action, {}};
    for (const AuthorityRule& r : state.authority_rules()) {
      if (Covers(r, request, action) && std::find(need.approvers.begin(), need.approvers.end(),
                                                  r.approver) == need.approvers.end()) {
        need.approvers.push_back(r.approver);
      }
    }
    needs.push_back(std::move(need));
  }
  return needs;
}

bool MayApprove(const State& state, const CapacityRequest& request, ApprovalAction action,
                const Approver& who, absl::Time now) {
  for (const AuthorityRule& r : state.authority_rules()) {
    if (!Covers(r, request, action)) continue;
    if (IsSubject(r.approver, who)) return true;
    for (const Delegation& d : state.delegations()) {
      if (d.from == r.approver && d.to == who.principal && now < d.expires_at) return true;
    }
  }
  return false;
}

}  // namespace arbiter::core
