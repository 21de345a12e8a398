#include "core/approval.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include "core/budget.h"

namespace arbiter::core {
namespace {

bool Given(const CapacityRequest& request, ApprovalAction action) {
  const std::string prefix = absl::StrCat(ApprovalActionName(action), ":");
  return std::any_of(request.approvals.begin(), request.approvals.end(),
                     [&](const std::string& a) { return absl::StartsWith(a, prefix); });
}

// Whether `rule` governs `action` for `request` (pool and, for guaranteed
// work, org-wide only), and its limits cover the request's size, run time
// and projected cost.
bool Covers(const State& state, const AuthorityRule& rule, const CapacityRequest& request,
            ApprovalAction action, absl::Time now) {
  if (rule.action != action) return false;
  if (action == ApprovalAction::kGuaranteed) {
    if (!rule.pool.empty()) return false;
  } else if (!rule.pool.empty() && rule.pool != request.spec.pool) {
    return false;
  }
  if (rule.limit_milli != kUnlimited && request.spec.total_gpu_milli() > rule.limit_milli) {
    return false;
  }
  if (rule.limit_seconds != kUnlimited &&
      (request.spec.duration == absl::ZeroDuration() ||
       request.spec.duration > absl::Seconds(rule.limit_seconds))) {
    return false;
  }
  return rule.limit_micros == kUnlimited ||
         CeilingCost(state, request.spec, now) <= rule.limit_micros;
}

// Whether a kLong rule's threshold is passed: open-ended, or longer.
bool RunsLong(const AuthorityRule& rule, const CapacityRequest& request) {
  return request.spec.duration == absl::ZeroDuration() ||
         request.spec.duration > absl::Seconds(rule.threshold_seconds);
}

// Whether some rule of the pool (or org-wide) puts `action` under approval
// for `request`.
bool Governed(const State& state, const CapacityRequest& request, ApprovalAction action) {
  for (const AuthorityRule& r : state.authority_rules()) {
    if (r.action != action || (!r.pool.empty() && r.pool != request.spec.pool)) continue;
    if (action == ApprovalAction::kLarge) {
      if (request.spec.total_gpu_milli() > r.threshold_milli) return true;
    } else if (action == ApprovalAction::kLong) {
      if (RunsLong(r, request)) return true;
    } else {
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
                                          bool borrowing, bool over_budget, absl::Time now) {
  std::vector<ApprovalAction> actions;
  if (over_budget) actions.push_back(ApprovalAction::kOverBudget);
  if (request.spec.guaranteed) actions.push_back(ApprovalAction::kGuaranteed);
  if (Governed(state, request, ApprovalAction::kLarge)) actions.push_back(ApprovalAction::kLarge);
  if (Governed(state, request, ApprovalAction::kLong)) actions.push_back(ApprovalAction::kLong);
  if (borrowing && Governed(state, request, ApprovalAction::kBorrow)) {
    actions.push_back(ApprovalAction::kBorrow);
  }
  std::vector<ApprovalNeed> needs;
  for (ApprovalAction action : actions) {
    if (Given(request, action)) continue;
    ApprovalNeed need{action, {}};
    for (const AuthorityRule& r : state.authority_rules()) {
      if (Covers(state, r, request, action, now) &&
          std::find(need.approvers.begin(), need.approvers.end(), r.approver) ==
              need.approvers.end()) {
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
    if (!Covers(state, r, request, action, now)) continue;
    if (IsSubject(r.approver, who)) return true;
    for (const Delegation& d : state.delegations()) {
      if (d.from == r.approver && d.to == who.principal && now < d.expires_at) return true;
    }
  }
  return false;
}

}  // namespace arbiter::core
