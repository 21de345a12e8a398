// Governance: teams in a cohort tree, their quotas, coexistence rules of
// workload classes, role bindings, authority rules, the price book, budgets
// and delegations. See proto/arbiter/v1/governance.proto for each call's
// contract; errors of the changes are those of core/arbitration.h.
//
// Every call checks the caller's access first. Changes whose argument the
// edge converts take it as a StatusOr: a conversion error is answered only
// after the access check, so that an unauthorized caller learns nothing
// from validation (GrantRole and RevokeRole need the binding to know the
// scope to check, and convert first).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "app/authz.h"
#include "app/context.h"
#include "core/arbitration.h"
#include "core/coexistence.h"
#include "core/model.h"
#include "store/store.h"

namespace arbiter::app {

// A team's budget and what it spent in the month.
struct BudgetUsage {
  core::Budget budget;
  int64_t spent_micros = 0;
};
struct BudgetReport {
  std::vector<BudgetUsage> budgets;
  absl::Time month_start;
};

// The caller as authorization sees it (GovernanceService.WhoAmI).
struct CallerView {
  std::string principal;
  std::vector<std::string> groups;
  std::vector<core::RoleBinding> bindings;
  bool platform_admin = false;
};

class Governance {
 public:
  explicit Governance(const Context& ctx) : ctx_(ctx) {}

  void CreateTeam(const Caller& caller, core::Team team, Reply<Done> reply) const;
  void ListTeams(const Caller& caller, Reply<std::vector<core::Team>> reply) const;
  void SetQuota(const Caller& caller, core::Quota quota, Reply<Done> reply) const;
  // A whole organisation in one decision (core::ImportOrganisation).
  void ImportOrganisation(const Caller& caller, core::Organisation org,
                          Reply<core::ImportCounts> reply) const;
  // Quotas of `team` ("" for all) with what each team uses of them.
  void ListQuotas(const Caller& caller, std::string team,
                  Reply<std::vector<store::QuotaUsage>> reply) const;

  void SetCoexistenceRule(const Caller& caller, absl::StatusOr<core::ClassRule> rule,
                          Reply<Done> reply) const;
  // The rule in force for every pair of workload classes.
  void ListCoexistenceRules(const Caller& caller, Reply<std::vector<core::ClassRule>> reply) const;

  // Platform admins may grant and revoke any binding; a team admin only team
  // roles on its team or below.
  void GrantRole(const Caller& caller, core::RoleBinding binding, Reply<Done> reply) const;
  void RevokeRole(const Caller& caller, core::RoleBinding binding, Reply<Done> reply) const;
  void ListRoleBindings(const Caller& caller, Reply<std::vector<core::RoleBinding>> reply) const;
  // The caller as authorization sees it (WhoAmI); replies at once, from
  // memory. UNAUTHENTICATED without an identity.
  void WhoAmI(const Caller& caller, Reply<CallerView> reply) const;

  void SetAuthorityRule(const Caller& caller, absl::StatusOr<core::AuthorityRule> rule,
                        Reply<Done> reply) const;
  void RemoveAuthorityRule(const Caller& caller, absl::StatusOr<core::AuthorityRule> rule,
                           Reply<Done> reply) const;
  void ListAuthorityRules(const Caller& caller,
                          Reply<std::vector<core::AuthorityRule>> reply) const;

  void SetPrice(const Caller& caller, absl::StatusOr<core::Price> price, Reply<Done> reply) const;
  // Every version of the price book, by model, class and time; with `at`,
  // only the price in force at `at` for each model and class.
  void ListPrices(const Caller& caller, std::optional<absl::Time> at,
                  Reply<std::vector<core::Price>> reply) const;
  void SetBudget(const Caller& caller, absl::StatusOr<core::Budget> budget,
                 Reply<Done> reply) const;
  // Budgets with each team's spend in the month holding `month` (default:
  // the current month, by the application's clock).
  void ListBudgets(const Caller& caller, std::optional<absl::Time> month,
                   Reply<BudgetReport> reply) const;
  // Watt budgets of pools, racks and sites (docs/power.md).
  void SetPowerBudget(const Caller& caller, absl::StatusOr<core::PowerBudget> budget,
                      Reply<Done> reply) const;
  void ListPowerBudgets(const Caller& caller, Reply<std::vector<core::PowerBudget>> reply) const;

  // Delegations are made and revoked by the delegating principal (or anyone
  // on a plaintext development server); a refusal by the core is recorded.
  void Delegate(const Caller& caller, absl::StatusOr<core::Delegation> delegation,
                Reply<Done> reply) const;
  void RevokeDelegation(const Caller& caller, core::Delegation delegation, Reply<Done> reply) const;
  void ListDelegations(const Caller& caller, Reply<std::vector<core::Delegation>> reply) const;

 private:
  // Checks access to `method` on `resource`, then runs `change` as a
  // command whose only result is success.
  using Change =
      std::function<absl::Status(core::State& state, absl::Time now, core::ChangeSet& changes)>;
  void RunChange(const Caller& caller, const char* method, const Resource& resource,
                 const absl::Status& argument, Change change, Reply<Done> reply) const;
  // Checks access to `method`, then runs `read` on the read workers.
  template <typename T>
  void RunListing(const Caller& caller, const char* method, std::function<absl::StatusOr<T>()> read,
                  Reply<T> reply) const;

  const Context ctx_;
};

}  // namespace arbiter::app
