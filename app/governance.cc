#include "app/governance.h"

#include <utility>

#include "core/arbitration.h"
#include "core/budget.h"

namespace arbiter::app {
namespace {

// The team a team admin must hold to grant or revoke `b`: its team, for team
// roles at team scope; none otherwise (only platform admins may).
Resource GrantScope(const core::RoleBinding& b) {
  const bool team_role = b.role == core::Role::kTeamAdmin || b.role == core::Role::kTeamMember;
  if (team_role && b.scope_kind == core::ScopeKind::kTeam) return Resource{b.scope, ""};
  return Resource{};
}

// The principal a delegation is checked against: none on a plaintext
// development server, where anyone may.
std::string Delegator(const Caller& caller) { return caller.insecure ? "" : caller.principal; }

}  // namespace

void Governance::RunChange(const Caller& caller, const char* method, const Resource& resource,
                           const absl::Status& argument, Change change, Reply<Done> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, method, resource); !access.ok()) {
    return reply(access);
  }
  if (!argument.ok()) return reply(argument);
  RunCommand<Done>(
      ctx_, caller.actor(),
      [change = std::move(change)](core::State& state, absl::Time now,
                                   core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = change(state, now, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

template <typename T>
void Governance::RunListing(const Caller& caller, const char* method,
                            std::function<absl::StatusOr<T>()> read, Reply<T> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, method, {}); !access.ok()) {
    return reply(access);
  }
  RunRead<T>(ctx_, std::move(read), std::move(reply));
}

void Governance::CreateTeam(const Caller& caller, core::Team team, Reply<Done> reply) const {
  const Resource parent{team.parent, ""};
  RunChange(
      caller, "GovernanceService.CreateTeam", parent, absl::OkStatus(),
      [team = std::move(team)](core::State& state, absl::Time, core::ChangeSet& changes) {
        return core::CreateTeam(state, team, changes);
      },
      std::move(reply));
}

void Governance::ListTeams(const Caller& caller, Reply<std::vector<core::Team>> reply) const {
  RunListing<std::vector<core::Team>>(
      caller, "GovernanceService.ListTeams", [store = ctx_.store] { return store->ListTeams(); },
      std::move(reply));
}

void Governance::SetQuota(const Caller& caller, core::Quota quota, Reply<Done> reply) const {
  const Resource pool{"", quota.pool};
  RunChange(
      caller, "GovernanceService.SetQuota", pool, absl::OkStatus(),
      [quota = std::move(quota)](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::SetQuota(state, quota, now, changes);
      },
      std::move(reply));
}

void Governance::ImportOrganisation(const Caller& caller, core::Organisation org,
                                    Reply<core::ImportCounts> reply) const {
  constexpr char kMethod[] = "GovernanceService.ImportOrganisation";
  if (absl::Status access = ctx_.access->Check(caller, kMethod, {}); !access.ok()) {
    return reply(access);
  }
  RunCommand<core::ImportCounts>(
      ctx_, caller.actor(),
      [org = std::move(org)](core::State& state, absl::Time now, core::ChangeSet& changes) {
        return core::ImportOrganisation(state, org, now, changes);
      },
      std::move(reply));
}

void Governance::ListQuotas(const Caller& caller, std::string team,
                            Reply<std::vector<store::QuotaUsage>> reply) const {
  RunListing<std::vector<store::QuotaUsage>>(
      caller, "GovernanceService.ListQuotas",
      [store = ctx_.store, team = std::move(team)] { return store->ListQuotas(team); },
      std::move(reply));
}

void Governance::SetCoexistenceRule(const Caller& caller, absl::StatusOr<core::ClassRule> rule,
                                    Reply<Done> reply) const {
  const absl::Status argument = rule.status();
  RunChange(
      caller, "GovernanceService.SetCoexistenceRule", {}, argument,
      [rule = rule.value_or(core::ClassRule{})](core::State& state, absl::Time now,
                                                core::ChangeSet& changes) {
        return core::SetCoexistenceRule(state, rule, now, changes);
      },
      std::move(reply));
}

void Governance::ListCoexistenceRules(const Caller& caller,
                                      Reply<std::vector<core::ClassRule>> reply) const {
  RunListing<std::vector<core::ClassRule>>(
      caller, "GovernanceService.ListCoexistenceRules",
      [store = ctx_.store]() -> absl::StatusOr<std::vector<core::ClassRule>> {
        absl::StatusOr<core::CoexistenceMatrix> matrix = store->GetCoexistence();
        if (!matrix.ok()) return matrix.status();
        // Each unordered pair of the four workload classes once.
        std::vector<core::ClassRule> rules;
        for (int a = 1; a <= 4; ++a) {
          for (int b = a; b <= 4; ++b) {
            core::ClassRule rule;
            rule.a = static_cast<core::WorkloadClass>(a);
            rule.b = static_cast<core::WorkloadClass>(b);
            rule.rule = matrix->Rule(rule.a, rule.b);
            rules.push_back(rule);
          }
        }
        return rules;
      },
      std::move(reply));
}

void Governance::GrantRole(const Caller& caller, core::RoleBinding binding,
                           Reply<Done> reply) const {
  const Resource scope = GrantScope(binding);
  RunChange(
      caller, "GovernanceService.GrantRole", scope, absl::OkStatus(),
      [b = std::move(binding)](core::State& state, absl::Time, core::ChangeSet& changes) {
        return core::GrantRole(state, b, changes);
      },
      std::move(reply));
}

void Governance::RevokeRole(const Caller& caller, core::RoleBinding binding,
                            Reply<Done> reply) const {
  const Resource scope = GrantScope(binding);
  RunChange(
      caller, "GovernanceService.RevokeRole", scope, absl::OkStatus(),
      [b = std::move(binding)](core::State& state, absl::Time, core::ChangeSet& changes) {
        return core::RevokeRole(state, b, changes);
      },
      std::move(reply));
}

void Governance::ListRoleBindings(const Caller& caller,
                                  Reply<std::vector<core::RoleBinding>> reply) const {
  RunListing<std::vector<core::RoleBinding>>(
      caller, "GovernanceService.ListRoleBindings",
      [store = ctx_.store] { return store->ListRoleBindings(); }, std::move(reply));
}

void Governance::WhoAmI(const Caller& caller, Reply<CallerView> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "GovernanceService.WhoAmI", {});
      !access.ok()) {
    return reply(access);
  }
  const Authorizer& authz = ctx_.access->authorizer();
  reply(CallerView{caller.principal, caller.groups, authz.BindingsOf(caller),
                   authz.IsPlatformAdmin(caller)});
}

void Governance::SetAuthorityRule(const Caller& caller, absl::StatusOr<core::AuthorityRule> rule,
                                  Reply<Done> reply) const {
  const absl::Status argument = rule.status();
  RunChange(
      caller, "GovernanceService.SetAuthorityRule", {}, argument,
      [r = rule.value_or(core::AuthorityRule{})](core::State& state, absl::Time,
                                                 core::ChangeSet& changes) {
        return core::SetAuthorityRule(state, r, changes);
      },
      std::move(reply));
}

void Governance::RemoveAuthorityRule(const Caller& caller, absl::StatusOr<core::AuthorityRule> rule,
                                     Reply<Done> reply) const {
  const absl::Status argument = rule.status();
  RunChange(
      caller, "GovernanceService.RemoveAuthorityRule", {}, argument,
      [r = rule.value_or(core::AuthorityRule{})](core::State& state, absl::Time,
                                                 core::ChangeSet& changes) {
        return core::RemoveAuthorityRule(state, r, changes);
      },
      std::move(reply));
}

void Governance::ListAuthorityRules(const Caller& caller,
                                    Reply<std::vector<core::AuthorityRule>> reply) const {
  RunListing<std::vector<core::AuthorityRule>>(
      caller, "GovernanceService.ListAuthorityRules",
      [store = ctx_.store] { return store->ListAuthorityRules(); }, std::move(reply));
}

void Governance::SetPrice(const Caller& caller, absl::StatusOr<core::Price> price,
                          Reply<Done> reply) const {
  const absl::Status argument = price.status();
  RunChange(
      caller, "GovernanceService.SetPrice", {}, argument,
      [p = price.value_or(core::Price{})](core::State& state, absl::Time,
                                          core::ChangeSet& changes) {
        return core::SetPrice(state, p, changes);
      },
      std::move(reply));
}

void Governance::ListPrices(const Caller& caller, std::optional<absl::Time> at,
                            Reply<std::vector<core::Price>> reply) const {
  RunListing<std::vector<core::Price>>(
      caller, "GovernanceService.ListPrices",
      [store = ctx_.store, at]() -> absl::StatusOr<std::vector<core::Price>> {
        absl::StatusOr<std::vector<core::Price>> prices = store->ListPrices();
        if (!prices.ok() || !at.has_value()) return prices;
        // Ordered by model, class, time: keep the last one in force at `at`.
        std::vector<core::Price> in_force;
        for (size_t i = 0; i < prices->size(); ++i) {
          const core::Price& p = (*prices)[i];
          if (p.effective_from > *at) continue;
          const bool superseded = i + 1 < prices->size() &&
                                  (*prices)[i + 1].gpu_model == p.gpu_model &&
                                  (*prices)[i + 1].latency_class == p.latency_class &&
                                  (*prices)[i + 1].effective_from <= *at;
          if (!superseded) in_force.push_back(p);
        }
        return in_force;
      },
      std::move(reply));
}

void Governance::SetBudget(const Caller& caller, absl::StatusOr<core::Budget> budget,
                           Reply<Done> reply) const {
  const absl::Status argument = budget.status();
  RunChange(
      caller, "GovernanceService.SetBudget", {}, argument,
      [b = budget.value_or(core::Budget{})](core::State& state, absl::Time,
                                            core::ChangeSet& changes) {
        return core::SetBudget(state, b, changes);
      },
      std::move(reply));
}

void Governance::SetPowerBudget(const Caller& caller, absl::StatusOr<core::PowerBudget> budget,
                                Reply<Done> reply) const {
  const absl::Status argument = budget.status();
  RunChange(
      caller, "GovernanceService.SetPowerBudget", {}, argument,
      [b = budget.value_or(core::PowerBudget{})](core::State& state, absl::Time now,
                                                 core::ChangeSet& changes) {
        return core::SetPowerBudget(state, b, now, changes);
      },
      std::move(reply));
}

void Governance::ListPowerBudgets(const Caller& caller,
                                  Reply<std::vector<core::PowerBudget>> reply) const {
  RunListing<std::vector<core::PowerBudget>>(
      caller, "GovernanceService.ListPowerBudgets",
      [store = ctx_.store]() { return store->ListPowerBudgets(); }, std::move(reply));
}

void Governance::ListBudgets(const Caller& caller, std::optional<absl::Time> month,
                             Reply<BudgetReport> reply) const {
  const absl::Time when = month.has_value() ? *month : ctx_.clock->TimeNow();
  const absl::Time from = core::MonthStart(when);
  RunListing<BudgetReport>(
      caller, "GovernanceService.ListBudgets",
      [store = ctx_.store, from]() -> absl::StatusOr<BudgetReport> {
        absl::StatusOr<std::vector<core::Budget>> budgets = store->ListBudgets();
        if (!budgets.ok()) return budgets.status();
        absl::StatusOr<std::map<std::string, int64_t>> spend = store->MonthSpend(from);
        if (!spend.ok()) return spend.status();
        BudgetReport report;
        report.month_start = from;
        for (core::Budget& b : *budgets) {
          const int64_t spent = (*spend)[b.team];
          report.budgets.push_back(BudgetUsage{std::move(b), spent});
        }
        return report;
      },
      std::move(reply));
}

void Governance::Delegate(const Caller& caller, absl::StatusOr<core::Delegation> delegation,
                          Reply<Done> reply) const {
  const absl::Status argument = delegation.status();
  RunChange(
      caller, "GovernanceService.Delegate", {}, argument,
      [access = ctx_.access, who = Delegator(caller), d = delegation.value_or(core::Delegation{})](
          core::State& state, absl::Time now, core::ChangeSet& changes) {
        absl::Status status = core::Delegate(state, d, who, now, changes);
        if (absl::IsPermissionDenied(status)) {
          access->RecordRefusal(who, "GovernanceService.Delegate", status);
        }
        return status;
      },
      std::move(reply));
}

void Governance::RevokeDelegation(const Caller& caller, core::Delegation delegation,
                                  Reply<Done> reply) const {
  RunChange(
      caller, "GovernanceService.RevokeDelegation", {}, absl::OkStatus(),
      [access = ctx_.access, who = Delegator(caller), d = std::move(delegation)](
          core::State& state, absl::Time, core::ChangeSet& changes) {
        absl::Status status = core::RevokeDelegation(state, d, who, changes);
        if (absl::IsPermissionDenied(status)) {
          access->RecordRefusal(who, "GovernanceService.RevokeDelegation", status);
        }
        return status;
      },
      std::move(reply));
}

void Governance::ListDelegations(const Caller& caller,
                                 Reply<std::vector<core::Delegation>> reply) const {
  RunListing<std::vector<core::Delegation>>(
      caller, "GovernanceService.ListDelegations",
      [store = ctx_.store] { return store->ListDelegations(); }, std::move(reply));
}

}  // namespace arbiter::app
