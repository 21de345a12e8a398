// The arbitration functions that change configuration without deciding any
// request: clusters, pools, teams, role bindings, authority rules, prices and
// budgets. (Those that admit waiting work, such as RegisterNode and SetQuota,
// live in arbitration.cc.) Declared in core/arbitration.h.
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

absl::Status NotFound(absl::string_view field, absl::string_view what, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(field, ": unknown ", what, " '", name, "'"));
}

constexpr LatencyClass kPricedClasses[] = {LatencyClass::kServing, LatencyClass::kBatch,
                                           LatencyClass::kSpot, LatencyClass::kDev};

// `model`'s prices by class with `price` added.
std::map<LatencyClass, std::map<absl::Time, int64_t>> HistoriesWith(const State& state,
                                                                    const Price& price) {
  std::map<LatencyClass, std::map<absl::Time, int64_t>> out;
  for (LatencyClass c : kPricedClasses) {
    if (const auto* h = state.PriceHistory(price.gpu_model, c)) out[c] = *h;
  }
  out[price.latency_class][price.effective_from] = price.micros_per_gpu_hour;
  return out;
}

std::optional<int64_t> InForce(const std::map<absl::Time, int64_t>& history, absl::Time at) {
  auto it = history.upper_bound(at);
  if (it == history.begin()) return std::nullopt;
  return std::prev(it)->second;
}

// Spot capacity is priced lowest: from `price` on, at every change of the
// model's prices, its SPOT price is at most each other class's price.
// FAILED_PRECONDITION naming price.micros_per_gpu_hour otherwise.
absl::Status CheckSpotLowest(const State& state, const Price& price) {
  const auto histories = HistoriesWith(state, price);
  auto spot = histories.find(LatencyClass::kSpot);
  if (spot == histories.end()) return absl::OkStatus();
  std::set<absl::Time> changes;
  for (const auto& [c, h] : histories) {
    for (auto it = h.lower_bound(price.effective_from); it != h.end(); ++it)
      changes.insert(it->first);
  }
  for (absl::Time at : changes) {
    const std::optional<int64_t> spot_price = InForce(spot->second, at);
    if (!spot_price.has_value()) continue;
    for (const auto& [c, h] : histories) {
      const std::optional<int64_t> other = InForce(h, at);
      if (c == LatencyClass::kSpot || !other.has_value() || *spot_price <= *other) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("price.micros_per_gpu_hour: spot capacity is priced lowest, but from ",
                       absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", at, absl::UTCTimeZone()),
                       " the spot price of ", price.gpu_model, " (", *spot_price,
                       ") would exceed its ", LatencyClassName(c), " price (", *other, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SetPrice(State& state, const Price& price, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidatePrice(price));
  if (state.FindGpuModel(price.gpu_model) == nullptr) {
    return NotFound("price.gpu_model", "GPU model", price.gpu_model);
  }
  const auto* history = state.PriceHistory(price.gpu_model, price.latency_class);
  if (history != nullptr && history->contains(price.effective_from)) {
    return absl::AlreadyExistsError(
        "price.effective_from: a price of this model and class starts then; prices are "
        "versioned, set a new one from another time");
  }
  ARBITER_RETURN_IF_ERROR(CheckSpotLowest(state, price));
  ARBITER_RETURN_IF_ERROR(state.LoadPrice(price));
  changes.changes.emplace_back(price);
  return absl::OkStatus();
}

absl::Status SetBudget(State& state, const Budget& budget, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateBudget(budget));
  if (state.FindTeam(budget.team) == nullptr) return NotFound("budget.team", "team", budget.team);
  ARBITER_RETURN_IF_ERROR(state.LoadBudget(budget));
  changes.changes.emplace_back(budget);
  return absl::OkStatus();
}

absl::StatusOr<CapacityRequest> ReclaimIdle(State& state, int64_t id, absl::Duration notice,
                                            const std::string& why, absl::Time now,
                                            ChangeSet& changes) {
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr) return absl::NotFoundError(absl::StrCat("id: no live request ", id));
  if (live->state != RequestState::kAdmitted || !live->spec.preemptible || live->spec.guaranteed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "id: request ", id, " is not admitted preemptible work; idle reclaim only reports it"));
  }
  CapacityRequest r = *live;
  r.state = RequestState::kPreempting;
  r.preempt_deadline = now + notice;
  r.preempted_by = 0;
  r.updated_at = now;
  r.reason_code = kReasonIdleReclaim;
  r.reason = absl::StrCat("idle: ", why, "; vacate within ", absl::ToInt64Seconds(notice), " s");
  state.PutRequest(r);
  changes.changes.emplace_back(RequestWrite{r, /*is_new=*/false});
  return r;
}

absl::Status SetIdlePolicy(State& state, const IdlePolicy& policy, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateIdlePolicy(policy));
  changes.changes.emplace_back(policy);
  return absl::OkStatus();
}

absl::Status SetSlo(State& state, const Slo& slo, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateSlo(slo));
  if (state.FindTeam(slo.team) == nullptr) return NotFound("slo.team", "team", slo.team);
  if (state.FindPool(slo.pool) == nullptr) return NotFound("slo.pool", "pool", slo.pool);
  ARBITER_RETURN_IF_ERROR(state.LoadSlo(slo));
  changes.changes.emplace_back(slo);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RecordIncident(State& state, Incident incident, ChangeSet& changes) {
  const LatencyWindow& w = incident.window;
  if (state.FindSlo(w.team, w.service) == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("window.service: team '", w.team, "' declared no SLO for '", w.service, "'"));
  }
  if (int64_t id = state.FindIncident(w.team, w.service, w.start); id != 0) return id;
  incident.id = state.TakeIncidentId();
  state.LoadIncident(w.team, w.service, w.start, incident.id);
  const int64_t id = incident.id;
  std::vector<ExternalityCharge> charges = ChargesOf(incident);
  changes.changes.emplace_back(IncidentWrite{std::move(incident)});
  for (ExternalityCharge& c : charges) changes.changes.emplace_back(std::move(c));
  return id;
}

absl::Status ClosePeriod(State& state, const PeriodClose& close, absl::Time now,
                         ChangeSet& changes) {
  if (close.to <= close.from) {
    return absl::InvalidArgumentError("period.to: must be after period.from");
  }
  if (close.to > now) {
    return absl::InvalidArgumentError("period.to: a period can be closed only once it has ended");
  }
  if (auto overlap = state.FindClosedOverlap(close.from, close.to)) {
    return absl::FailedPreconditionError(absl::StrCat("period: overlaps the closed period ",
                                                      absl::FormatTime(overlap->first), " to ",
                                                      absl::FormatTime(overlap->second)));
  }
  state.LoadClosedPeriod(close.from, close.to);
  changes.changes.emplace_back(close);
  return absl::OkStatus();
}

absl::Status SetAuthorityRule(State& state, const AuthorityRule& rule, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateAuthorityRule(rule));
  if (!rule.pool.empty() && state.FindPool(rule.pool) == nullptr) {
    return NotFound("rule.pool", "pool", rule.pool);
  }
  if (state.authority_rules().contains(rule)) {
    return absl::AlreadyExistsError("rule: this authority rule exists");
  }
  ARBITER_RETURN_IF_ERROR(state.LoadAuthorityRule(rule));
  changes.changes.emplace_back(AuthorityRuleWrite{rule, /*remove=*/false});
  return absl::OkStatus();
}

absl::Status RemoveAuthorityRule(State& state, const AuthorityRule& rule, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateAuthorityRule(rule));
  if (!state.RemoveAuthorityRule(rule)) return absl::NotFoundError("rule: no such authority rule");
  changes.changes.emplace_back(AuthorityRuleWrite{rule, /*remove=*/true});
  return absl::OkStatus();
}

absl::Status GrantRole(State& state, const RoleBinding& binding, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateRoleBinding(binding));
  if (binding.scope_kind == ScopeKind::kTeam && state.FindTeam(binding.scope) == nullptr) {
    return NotFound("binding.scope", "team", binding.scope);
  }
  if (binding.scope_kind == ScopeKind::kPool && state.FindPool(binding.scope) == nullptr) {
    return NotFound("binding.scope", "pool", binding.scope);
  }
  if (state.role_bindings().contains(binding)) {
    return absl::AlreadyExistsError("binding: this role binding exists");
  }
  ARBITER_RETURN_IF_ERROR(state.LoadRoleBinding(binding));
  changes.changes.emplace_back(RoleBindingWrite{binding, /*revoke=*/false});
  return absl::OkStatus();
}

absl::Status RevokeRole(State& state, const RoleBinding& binding, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateRoleBinding(binding));
  if (!state.RemoveRoleBinding(binding)) {
    return absl::NotFoundError("binding: no such role binding");
  }
  changes.changes.emplace_back(RoleBindingWrite{binding, /*revoke=*/true});
  return absl::OkStatus();
}

absl::Status CreateCluster(State& state, const Cluster& cluster, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (state.HasCluster(cluster.name)) {
    return absl::AlreadyExistsError(absl::StrCat("cluster.name: '", cluster.name, "' exists"));
  }
  ARBITER_RETURN_IF_ERROR(state.LoadCluster(cluster));
  changes.changes.emplace_back(cluster);
  return absl::OkStatus();
}

absl::Status CreatePool(State& state, const Pool& pool, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidatePool(pool));
  if (state.FindPool(pool.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("pool.name: '", pool.name, "' exists"));
  }
  for (size_t i = 0; i < pool.headroom.size(); ++i) {
    if (state.FindGpuModel(pool.headroom[i].gpu_model) == nullptr) {
      return NotFound(absl::StrCat("pool.headroom[", i, "].gpu_model"), "GPU model",
                      pool.headroom[i].gpu_model);
    }
  }
  ARBITER_RETURN_IF_ERROR(state.LoadPool(pool));
  changes.changes.emplace_back(pool);
  return absl::OkStatus();
}

absl::Status CreateTeam(State& state, const Team& team, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateTeam(team));
  if (state.FindTeam(team.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("team.name: '", team.name, "' exists"));
  }
  if (!team.parent.empty() && state.FindTeam(team.parent) == nullptr) {
    return NotFound("team.parent", "team", team.parent);
  }
  ARBITER_RETURN_IF_ERROR(state.LoadTeam(team));
  changes.changes.emplace_back(team);
  return absl::OkStatus();
}

namespace {

absl::Status CheckDelegation(const Delegation& d, const std::string& caller) {
  ARBITER_RETURN_IF_ERROR(ValidateSubject("delegation.from", d.from));
  ARBITER_RETURN_IF_ERROR(ValidateSubject("delegation.to", d.to));
  if (absl::StartsWith(d.from, "group:") || absl::StartsWith(d.to, "group:")) {
    return absl::InvalidArgumentError("delegation: delegations are between principals");
  }
  if (d.from == d.to) return absl::InvalidArgumentError("delegation.to: must differ from from");
  if (!caller.empty() && caller != d.from) {
    return absl::PermissionDeniedError(
        absl::StrCat(caller, " may not delegate the authority of ", d.from));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Delegate(State& state, const Delegation& d, const std::string& caller, absl::Time now,
                      ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(CheckDelegation(d, caller));
  if (d.expires_at <= now) {
    return absl::InvalidArgumentError("delegation.expires_at: must be in the future");
  }
  state.LoadDelegation(d);
  changes.changes.emplace_back(DelegationWrite{d, /*revoke=*/false});
  return absl::OkStatus();
}

absl::Status RevokeDelegation(State& state, const Delegation& d, const std::string& caller,
                              ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(CheckDelegation(d, caller));
  if (!state.RemoveDelegation(d)) return absl::NotFoundError("delegation: no such delegation");
  changes.changes.emplace_back(DelegationWrite{d, /*revoke=*/true});
  return absl::OkStatus();
}

}  // namespace arbiter::core
