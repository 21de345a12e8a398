#include "app/authz.h"

#include <algorithm>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace arbiter::app {
namespace {

using core::Role;
using core::ScopeKind;

// How a binding's scope must cover the call.
enum class Match {
  kOrg,            // Only org-wide bindings (platform admins).
  kAuthenticated,  // Any verified principal; the core decides (approvals).
  kAny,            // A binding of an allowed role at any scope: reads.
  kTeam,           // Org, or the call's team or a team above it.
  kPool,           // Org, or the call's pool.
};

struct Rule {
  const char* method;
  std::vector<Role> roles;  // Besides platform admins, who may always call.
  Match match;
};

// Everyone with a role, except telemetry agents.
const std::vector<Role> kReaders = {Role::kPoolAuthority, Role::kTeamAdmin, Role::kTeamMember,
                                    Role::kFinance, Role::kAuditor};
const std::vector<Role> kTeamWriters = {Role::kTeamAdmin, Role::kTeamMember};
// Readers and node agents.
const std::vector<Role> kReadersAndAgents = {Role::kPoolAuthority, Role::kTeamAdmin,
                                             Role::kTeamMember,    Role::kFinance,
                                             Role::kAuditor,       Role::kAgent};

// THE TABLE. Every RPC of arbiter.v1 is listed; anything else is refused.
const std::vector<Rule>& Rules() {
  static const std::vector<Rule>* rules = new std::vector<Rule>{
      // Agents read the catalog to name what their node has.
      {"InventoryService.ListGpuModels", kReadersAndAgents, Match::kAny},
      {"InventoryService.ListClusters", kReaders, Match::kAny},
      {"InventoryService.ListPools", kReaders, Match::kAny},
      {"InventoryService.GetServingForecast", kReaders, Match::kAny},
      {"InventoryService.ListNodes", kReaders, Match::kAny},
      {"InventoryService.SetGpuModel", {}, Match::kOrg},
      {"InventoryService.CreateCluster", {}, Match::kOrg},
      {"InventoryService.CreatePool", {}, Match::kOrg},
      // Node agents register their own node (arbiter-agent --register) and,
      // with controllers, keep nodes current and report their state;
      // removing one is for platform admins.
      {"InventoryService.RegisterNode", {Role::kAgent}, Match::kAny},
      {"InventoryService.UpdateNode", {Role::kAgent}, Match::kAny},
      {"InventoryService.CordonNode", {Role::kAgent}, Match::kAny},
      {"InventoryService.UncordonNode", {Role::kAgent}, Match::kAny},
      {"InventoryService.DrainNode", {Role::kAgent}, Match::kAny},
      {"InventoryService.MarkNodeFailed", {Role::kAgent}, Match::kAny},
      {"InventoryService.RemoveNode", {}, Match::kOrg},
      {"InventoryService.NodeHeartbeat", {Role::kAgent}, Match::kAny},
      {"GovernanceService.ListTeams", kReaders, Match::kAny},
      // A team admin creates teams under its own (resource: the parent).
      {"GovernanceService.CreateTeam", {Role::kTeamAdmin}, Match::kTeam},
      {"GovernanceService.ListQuotas", kReaders, Match::kAny},
      {"GovernanceService.SetQuota", {Role::kPoolAuthority}, Match::kPool},
      {"GovernanceService.ImportOrganisation", {}, Match::kOrg},
      {"GovernanceService.ListCoexistenceRules", kReaders, Match::kAny},
      {"GovernanceService.SetCoexistenceRule", {}, Match::kOrg},
      {"GovernanceService.ListRoleBindings", {Role::kAuditor}, Match::kAny},
      {"GovernanceService.WhoAmI", {}, Match::kAuthenticated},
      // A team admin grants and revokes team roles within its team
      // (resource: the binding's team, set only for team roles at team scope).
      {"GovernanceService.GrantRole", {Role::kTeamAdmin}, Match::kTeam},
      {"GovernanceService.RevokeRole", {Role::kTeamAdmin}, Match::kTeam},
      {"AllocationService.RequestCapacity", kTeamWriters, Match::kTeam},
      // An enforcer (an agent identity) releases an allocation whose
      // workload ended, and so confirms a preemption (docs/enforcement.md).
      {"AllocationService.ReleaseAllocation",
       {Role::kAgent, Role::kTeamAdmin, Role::kTeamMember},
       Match::kTeam},
      // An enforcer (an agent identity) or the allocation's team claims it.
      {"AllocationService.ClaimAllocation",
       {Role::kAgent, Role::kTeamAdmin, Role::kTeamMember},
       Match::kTeam},
      {"AllocationService.RenewLease",
       {Role::kAgent, Role::kTeamAdmin, Role::kTeamMember},
       Match::kTeam},
      // Who may approve is declared by authority rules, checked by the core.
      {"AllocationService.ApproveRequest", {}, Match::kAuthenticated},
      {"AllocationService.DenyRequest", {}, Match::kAuthenticated},
      {"GovernanceService.SetAuthorityRule", {}, Match::kOrg},
      {"GovernanceService.RemoveAuthorityRule", {}, Match::kOrg},
      {"GovernanceService.ListAuthorityRules", kReaders, Match::kAny},
      {"GovernanceService.SetPrice", {Role::kFinance}, Match::kAny},
      {"GovernanceService.ListPrices", kReaders, Match::kAny},
      {"GovernanceService.SetBudget", {Role::kFinance}, Match::kAny},
      {"GovernanceService.ListBudgets", {Role::kFinance, Role::kAuditor}, Match::kAny},
      {"GovernanceService.SetPowerBudget", {}, Match::kOrg},
      {"GovernanceService.ListPowerBudgets", kReaders, Match::kAny},
      // A principal delegates its own authority; the core checks that.
      {"GovernanceService.Delegate", {}, Match::kAuthenticated},
      {"GovernanceService.RevokeDelegation", {}, Match::kAuthenticated},
      {"GovernanceService.ListDelegations", kReaders, Match::kAny},
      // Enforcers (agents) read and watch the allocations they carry out.
      {"AllocationService.GetRequest", kReadersAndAgents, Match::kAny},
      {"AllocationService.ListRequests", kReaders, Match::kAny},
      {"AllocationService.WatchAllocations", kReadersAndAgents, Match::kAny},
      {"LedgerService.ListLedgerEntries", {Role::kAuditor, Role::kFinance}, Match::kAny},
      {"TelemetryService.StreamSamples", {Role::kAgent}, Match::kAny},
      {"TelemetryService.GetUtilization", kReaders, Match::kAny},
      {"TelemetryService.ListIdleAllocations", kReaders, Match::kAny},
      {"TelemetryService.GetRightSizing", kReaders, Match::kAny},
      {"TelemetryService.SetIdlePolicy", {}, Match::kOrg},
      {"TelemetryService.ListIdlePolicies", kReaders, Match::kAny},
      {"LedgerService.ListCheckpoints", {Role::kAuditor, Role::kFinance}, Match::kAny},
      // A team declares its own SLOs; its serving platform (an agent
      // identity, or the team's own) reports windows for it.
      {"ChargebackService.SetSlo", {Role::kTeamAdmin}, Match::kTeam},
      {"ChargebackService.ListSlos", kReaders, Match::kAny},
      {"ChargebackService.ReportLatency",
       {Role::kAgent, Role::kTeamAdmin, Role::kTeamMember},
       Match::kTeam},
      {"ChargebackService.ListIncidents", kReaders, Match::kAny},
      // Money is per team: a team reads its own statement (the request's
      // team, within the binding's); the organisation's, and other teams',
      // need an org-wide binding (finance, auditor).
      {"ChargebackService.GetChargeback",
       {Role::kTeamAdmin, Role::kTeamMember, Role::kFinance, Role::kAuditor},
       Match::kTeam},
      {"ChargebackService.ClosePeriod", {Role::kFinance}, Match::kAny},
  };
  return *rules;
}

const Rule* FindRule(absl::string_view method) {
  for (const Rule& r : Rules()) {
    if (method == r.method) return &r;
  }
  return nullptr;
}

}  // namespace

std::string Caller::actor() const {
  return principal.empty() ? std::string(kUnidentifiedActor) : principal;
}

Authorizer::Authorizer(std::vector<std::string> admins) : admins_(admins.begin(), admins.end()) {}

void Authorizer::Reset(const core::State& state) {
  absl::MutexLock lock(&mu_);
  bindings_ = state.role_bindings();
  parents_.clear();
  for (const auto& [name, team] : state.teams()) parents_[name] = team.parent;
}

void Authorizer::Apply(const core::Change& change) {
  absl::MutexLock lock(&mu_);
  if (const auto* w = std::get_if<core::RoleBindingWrite>(&change)) {
    if (w->revoke) {
      bindings_.erase(w->binding);
    } else {
      bindings_.insert(w->binding);
    }
  } else if (const auto* team = std::get_if<core::Team>(&change)) {
    parents_[team->name] = team->parent;
  }
}

bool Authorizer::Within(const std::string& team, const std::string& scope) const {
  std::string at = team;
  for (size_t depth = 0; !at.empty() && depth <= parents_.size(); ++depth) {
    if (at == scope) return true;
    auto it = parents_.find(at);
    if (it == parents_.end()) return false;
    at = it->second;
  }
  return false;
}

namespace {

// Whether a binding to `subject` (a principal, or "group:NAME") is the
// caller's.
bool IsSubject(const Caller& caller, const std::string& subject) {
  if (subject == caller.principal) return true;
  absl::string_view group = subject;
  return absl::ConsumePrefix(&group, "group:") &&
         std::find(caller.groups.begin(), caller.groups.end(), group) != caller.groups.end();
}

}  // namespace

absl::Status Authorizer::Check(const Caller& caller, absl::string_view method,
                               const Resource& resource) const {
  if (caller.insecure) return absl::OkStatus();
  if (caller.principal.empty()) {
    return absl::UnauthenticatedError(
        "a client certificate signed by the Arbiter CA is required for this call");
  }
  const Rule* rule = FindRule(method);
  if (rule == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(method, " is not in the access table"));
  }
  if (admins_.contains(caller.principal)) return absl::OkStatus();
  if (rule->match == Match::kAuthenticated) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  for (const core::RoleBinding& b : bindings_) {
    if (!IsSubject(caller, b.subject)) continue;
    if (b.role == Role::kPlatformAdmin && b.scope_kind == ScopeKind::kOrg) return absl::OkStatus();
    if (std::find(rule->roles.begin(), rule->roles.end(), b.role) == rule->roles.end()) continue;
    const bool org = b.scope_kind == ScopeKind::kOrg;
    switch (rule->match) {
      case Match::kOrg:
      case Match::kAuthenticated:
        break;
      case Match::kAny:
        return absl::OkStatus();
      case Match::kTeam:
        if (org || (b.scope_kind == ScopeKind::kTeam && !resource.team.empty() &&
                    (resource.team == kAnyTeam || Within(resource.team, b.scope)))) {
          return absl::OkStatus();
        }
        break;
      case Match::kPool:
        if (org || (b.scope_kind == ScopeKind::kPool && b.scope == resource.pool)) {
          return absl::OkStatus();
        }
        break;
    }
  }
  std::string what(method);
  if (!resource.team.empty()) absl::StrAppend(&what, " on team ", resource.team);
  if (!resource.pool.empty()) absl::StrAppend(&what, " on pool ", resource.pool);
  return absl::PermissionDeniedError(
      absl::StrCat(caller.principal, " has no role that allows ", what));
}

absl::Status Authorizer::CheckEnforcer(const Caller& caller, absl::string_view field) const {
  if (caller.insecure) return absl::OkStatus();
  if (caller.principal.empty()) {
    return absl::UnauthenticatedError(
        "a client certificate signed by the Arbiter CA is required for this call");
  }
  if (admins_.contains(caller.principal)) return absl::OkStatus();
  absl::ReaderMutexLock lock(&mu_);
  for (const core::RoleBinding& b : bindings_) {
    const bool subject =
        b.subject == caller.principal || (absl::StartsWith(b.subject, "group:") &&
                                          std::find(caller.groups.begin(), caller.groups.end(),
                                                    b.subject.substr(6)) != caller.groups.end());
    if (!subject) continue;
    if (b.role == Role::kAgent) return absl::OkStatus();
    if (b.role == Role::kPlatformAdmin && b.scope_kind == ScopeKind::kOrg) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": only an enforcer (the agent role) reports a workload's run; ",
                   caller.principal, " has no agent role"));
}

std::vector<std::string> Authorizer::Methods() {
  std::vector<std::string> out;
  for (const Rule& r : Rules()) out.emplace_back(r.method);
  return out;
}

std::vector<core::RoleBinding> Authorizer::BindingsOf(const Caller& caller) const {
  std::vector<core::RoleBinding> out;
  if (caller.principal.empty()) return out;
  absl::ReaderMutexLock lock(&mu_);
  for (const core::RoleBinding& b : bindings_) {
    if (IsSubject(caller, b.subject)) out.push_back(b);
  }
  return out;
}

bool Authorizer::IsPlatformAdmin(const Caller& caller) const {
  if (caller.insecure) return true;
  if (caller.principal.empty()) return false;
  if (admins_.contains(caller.principal)) return true;
  for (const core::RoleBinding& b : BindingsOf(caller)) {
    if (b.role == Role::kPlatformAdmin && b.scope_kind == ScopeKind::kOrg) return true;
  }
  return false;
}

}  // namespace arbiter::app
