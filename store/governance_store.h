// GovernanceReads: teams, quotas with their use, the coexistence matrix,
// role bindings, authority rules, the price book, budgets, delegations,
// spend and idle policies, served straight from the store by any replica.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/budget.h"
#include "core/coexistence.h"
#include "core/model.h"
#include "core/telemetry.h"

namespace arbiter::store {

struct QuotaUsage {
  core::Quota quota;
  int64_t used_milli = 0;
};

class GovernanceReads {
 public:
  virtual ~GovernanceReads() = default;

  // By name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Team>> ListTeams() = 0;
  // Quotas of `team` ("" for all), by team, pool and model, each with the
  // milli-GPU held by admitted and preempting requests charged to it.
  [[nodiscard]] virtual absl::StatusOr<std::vector<QuotaUsage>> ListQuotas(
      const std::string& team) = 0;
  // The coexistence matrix in force: the defaults with the stored rules set
  // over them.
  [[nodiscard]] virtual absl::StatusOr<core::CoexistenceMatrix> GetCoexistence() = 0;
  // By subject, role, scope kind and scope.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::RoleBinding>> ListRoleBindings() = 0;
  // By pool, action and approver.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::AuthorityRule>> ListAuthorityRules() = 0;
  // The price book, every version, by model, class and time.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Price>> ListPrices() = 0;
  // By team.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Budget>> ListBudgets() = 0;
  // Watt budgets by scope, then name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::PowerBudget>> ListPowerBudgets() = 0;
  // By from, to.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Delegation>> ListDelegations() = 0;
  // Costs charged per team to requests admitted in [from, to).
  [[nodiscard]] virtual absl::StatusOr<std::map<std::string, int64_t>> SpendBetween(
      absl::Time from, absl::Time to) = 0;
  // Costs charged per team to requests admitted in the UTC month that
  // starts at `month_start`: SpendBetween(month_start, the next month's
  // start), but a team whose spend is 0 may be left out. For budget reports
  // and /metrics, which ask often: a store should answer it from the
  // month's sums and the live requests, at a cost that does not grow with
  // history. REQUIRES: month_start == core::MonthStart(month_start).
  [[nodiscard]] virtual absl::StatusOr<std::map<std::string, int64_t>> MonthSpend(
      absl::Time month_start) {
    return SpendBetween(month_start, core::NextMonthStart(month_start));
  }
  // Idle policies set per class (without the built-in defaults), by class
  // name.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::IdlePolicy>> ListIdlePolicies() = 0;
};

}  // namespace arbiter::store
