// arbctl approve | deny | authority list | set | remove.
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "clients/arbctl/commands.h"
#include "clients/arbctl/table.h"

namespace arbiter::arbctl {

int Commands::Approve(int64_t id) {
  v1::ApproveRequestRequest req;
  req.set_id(id);
  v1::ApproveRequestResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::ApproveRequest, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Deny(int64_t id, const std::string& reason) {
  v1::DenyRequestRequest req;
  req.set_id(id);
  req.set_reason(reason);
  v1::DenyRequestResponse resp;
  if (!Call(allocation_, &v1::AllocationService::Stub::DenyRequest, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  PrintRequest(resp.request());
  return 0;
}

int Commands::Delegate(const std::string& from, const std::string& to, const std::string& until) {
  absl::Time t;
  if (!ParseWhen(until, &t)) {
    std::cerr << "arbctl: --until must be an RFC 3339 time or +<duration>\n";
    return 2;
  }
  v1::DelegateRequest req;
  req.mutable_delegation()->set_from(from);
  req.mutable_delegation()->set_to(to);
  req.mutable_delegation()->mutable_expires_at()->set_seconds(absl::ToUnixSeconds(t));
  v1::DelegateResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::Delegate, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << to << " may approve for " << from << " until " << absl::FormatTime(t) << "\n";
  return 0;
}

int Commands::RevokeDelegation(const std::string& from, const std::string& to) {
  v1::RevokeDelegationRequest req;
  req.mutable_delegation()->set_from(from);
  req.mutable_delegation()->set_to(to);
  v1::RevokeDelegationResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::RevokeDelegation, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << to << " may no longer approve for " << from << "\n";
  return 0;
}

int Commands::ListDelegations() {
  v1::ListDelegationsResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListDelegations,
            v1::ListDelegationsRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t({"FROM", "TO", "UNTIL"});
  for (const v1::Delegation& d : resp.delegations()) {
    t.AddRow({d.from(), d.to(), absl::FormatTime(absl::FromUnixSeconds(d.expires_at().seconds()))});
  }
  PrintTable(t);
  return 0;
}

int Commands::ListAuthority() {
  v1::ListAuthorityRulesResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::ListAuthorityRules,
            v1::ListAuthorityRulesRequest(), &resp)) {
    return 1;
  }
  if (options_.json) return PrintJsonMessage(resp), 0;
  Table t(
      {"POOL", "ACTION", "APPROVER", "THRESHOLD", "UP_TO_MILLI", "UP_TO_SECONDS", "UP_TO_MICROS"});
  auto limit = [](int64_t v) { return v < 0 ? std::string("any") : absl::StrCat(v); };
  for (const v1::AuthorityRule& r : resp.rules()) {
    const std::string threshold =
        r.action() == v1::APPROVAL_ACTION_LARGE  ? absl::StrCat("> ", r.threshold_milli(), " milli")
        : r.action() == v1::APPROVAL_ACTION_LONG ? absl::StrCat("> ", r.threshold_seconds(), " s")
                                                 : "-";
    t.AddRow({r.pool().empty() ? "*" : r.pool(),
              absl::AsciiStrToLower(v1::ApprovalAction_Name(r.action()).substr(16)), r.approver(),
              threshold, limit(r.limit_milli()), limit(r.limit_seconds()),
              limit(r.limit_micros())});
  }
  PrintTable(t);
  return 0;
}

int Commands::SetAuthority(const std::string& pool, const std::string& action,
                           const std::string& approver, const AuthorityLimits& limits,
                           bool remove) {
  v1::AuthorityRule rule;
  v1::ApprovalAction a = v1::APPROVAL_ACTION_UNSPECIFIED;
  if (!v1::ApprovalAction_Parse("APPROVAL_ACTION_" + absl::AsciiStrToUpper(action), &a)) {
    std::cerr << "arbctl: --action must be borrow, guaranteed, large, over_budget or long\n";
    return 2;
  }
  rule.set_pool(pool);
  rule.set_action(a);
  rule.set_approver(approver);
  rule.set_limit_milli(limits.limit_milli);
  rule.set_threshold_milli(limits.threshold_milli);
  rule.set_threshold_seconds(limits.threshold_seconds);
  rule.set_limit_seconds(limits.limit_seconds);
  rule.set_limit_micros(limits.limit_micros);
  if (remove) {
    v1::RemoveAuthorityRuleRequest req;
    *req.mutable_rule() = rule;
    v1::RemoveAuthorityRuleResponse resp;
    if (!Call(governance_, &v1::GovernanceService::Stub::RemoveAuthorityRule, req, &resp)) {
      return 1;
    }
    std::cout << "removed\n";
    return 0;
  }
  v1::SetAuthorityRuleRequest req;
  *req.mutable_rule() = rule;
  v1::SetAuthorityRuleResponse resp;
  if (!Call(governance_, &v1::GovernanceService::Stub::SetAuthorityRule, req, &resp)) return 1;
  if (options_.json) return PrintJsonMessage(resp), 0;
  std::cout << action << " in " << (pool.empty() ? "every pool" : pool) << " needs approval by "
            << approver << "\n";
  return 0;
}

}  // namespace arbiter::arbctl
