#include "core/state.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

#include "core/budget.h"
#include "core/status_macros.h"

namespace arbiter::core {
namespace {

absl::Status Conflict(absl::string_view what) { return absl::FailedPreconditionError(what); }

// The window a request's holds keep their GPUs for: from its start (a
// backfill head's planned start; now, for one that waits for GPUs to drain),
// for its duration (for ever when it has none).
std::pair<absl::Time, absl::Time> HoldWindow(const CapacityRequest& request) {
  absl::Time start = request.spec.start_at;
  if (request.backfill_head() && request.planned_start != absl::InfiniteFuture()) {
    start = request.planned_start;
  }
  if (request.spec.duration == absl::ZeroDuration() || start == absl::InfinitePast()) {
    return {start, absl::InfiniteFuture()};
  }
  return {start, start + request.spec.duration};
}

}  // namespace

State::State(const State& other, RequestBook requests)
    : inventory_(other.inventory_),
      quotas_(other.quotas_),
      requests_(std::move(requests)),
      packing_(other.packing_),
      authority_(other.authority_),
      finances_(other.finances_),
      chargeback_(other.chargeback_),
      power_(other.power_),
      approval_timeout_(other.approval_timeout_),
      idempotency_window_(other.idempotency_window_),
      ended_key_memory_(other.ended_key_memory_),
      node_heartbeat_timeout_(other.node_heartbeat_timeout_),
      heartbeat_check_at_(other.heartbeat_check_at_),
      demand_sample_at_(other.demand_sample_at_),
      forecasts_(other.forecasts_),
      measured_usage_(other.measured_usage_),
      admission_(other.admission_),
      loosened_(other.loosened_),
      strict_heads_(other.strict_heads_) {}

absl::Status State::LoadGpuModel(GpuModel model) {
  return inventory_.LoadGpuModel(std::move(model));
}

absl::Status State::LoadCluster(Cluster cluster) {
  return inventory_.LoadCluster(std::move(cluster));
}

absl::Status State::LoadPool(Pool pool) {
  if (pool.proactive_reclaim) demand_sample_at_ = absl::InfinitePast();
  return inventory_.LoadPool(std::move(pool));
}

absl::Status State::LoadNode(Node node) { return inventory_.LoadNode(std::move(node)); }

absl::Status State::LoadTeam(Team team) { return quotas_.LoadTeam(std::move(team)); }

absl::Status State::LoadQuota(Quota quota) {
  if (FindTeam(quota.team) == nullptr || FindPool(quota.pool) == nullptr) {
    return Conflict(
        absl::StrCat("quota references unknown team ", quota.team, " or pool ", quota.pool));
  }
  if (!quota.gpu_model.empty() && FindGpuModel(quota.gpu_model) == nullptr) {
    return Conflict(absl::StrCat("quota references unknown GPU model ", quota.gpu_model));
  }
  quotas_.PutQuota(std::move(quota));
  return absl::OkStatus();
}

absl::Status State::LoadRoleBinding(RoleBinding binding) {
  const bool known = binding.scope_kind == ScopeKind::kOrg    ? binding.scope.empty()
                     : binding.scope_kind == ScopeKind::kTeam ? FindTeam(binding.scope) != nullptr
                     : binding.scope_kind == ScopeKind::kPool ? FindPool(binding.scope) != nullptr
                                                              : false;
  if (!known) return Conflict(absl::StrCat("role binding with unknown scope ", binding.scope));
  if (!authority_.AddRoleBinding(std::move(binding))) return Conflict("duplicate role binding");
  return absl::OkStatus();
}

absl::Status State::LoadAuthorityRule(AuthorityRule rule) {
  if (!rule.pool.empty() && FindPool(rule.pool) == nullptr) {
    return Conflict(absl::StrCat("authority rule for unknown pool ", rule.pool));
  }
  if (!authority_.AddAuthorityRule(std::move(rule))) return Conflict("duplicate authority rule");
  return absl::OkStatus();
}

absl::Status State::LoadPrice(const Price& price) {
  if (FindGpuModel(price.gpu_model) == nullptr) {
    return Conflict(absl::StrCat("price of unknown GPU model ", price.gpu_model));
  }
  if (!finances_.AddPrice(price)) {
    return Conflict(absl::StrCat("a price of ", price.gpu_model, " from that time exists"));
  }
  return absl::OkStatus();
}

void State::LoadPowerBudget(PowerBudget budget) {
  const bool first = power_.empty();
  power_.PutBudget(std::move(budget));
  if (first) RecountPowerDraws();
}

void State::RecountPowerDraws() {
  PowerBook recounted;
  for (const auto& [key, budget] : power_.budgets()) recounted.PutBudget(budget);
  for (const auto& [id, request] : requests_.live()) {
    if (HoldsCapacity(request.state)) {
      recounted.Charge(PowerDraws(request.spec.pool, request.placements), +1);
    }
  }
  power_ = std::move(recounted);
}

std::vector<ScopeDraw> State::PowerDraws(const std::string& pool,
                                         const std::vector<Placement>& placements) const {
  std::vector<ScopeDraw> out;
  for (const Placement& p : placements) {
    const Node* node = FindNode(p.node_id);
    if (node == nullptr) continue;
    int64_t mw = 0;
    for (int32_t g : p.gpu_indices) {
      const GpuModel* model = FindGpuModel(node->gpus[g].model);
      if (model != nullptr) mw += GpuDrawMilliwatts(*model, p.gpu_milli, p.mig_profile);
    }
    if (mw == 0) continue;
    out.push_back({PowerScope::kPool, pool, mw});
    if (!node->topology_domain.empty()) {
      out.push_back({PowerScope::kRack, node->topology_domain, mw});
    }
    out.push_back({PowerScope::kSite, node->cluster, mw});
  }
  return out;
}

void State::PutGpuModel(GpuModel model) {
  const GpuModel* old = FindGpuModel(model.name);
  const bool draws_change = old != nullptr && (old->tdp_watts != model.tdp_watts ||
                                               old->mig_profiles != model.mig_profiles);
  inventory_.PutGpuModel(std::move(model));
  if (draws_change && !power_.empty()) RecountPowerDraws();
}

absl::Status State::LoadBudget(Budget budget) {
  if (FindTeam(budget.team) == nullptr) {
    return Conflict(absl::StrCat("budget of unknown team ", budget.team));
  }
  finances_.PutBudget(std::move(budget));
  return absl::OkStatus();
}

absl::Status State::LoadSlo(const Slo& slo) {
  if (FindTeam(slo.team) == nullptr)
    return Conflict(absl::StrCat("SLO of unknown team ", slo.team));
  if (FindPool(slo.pool) == nullptr)
    return Conflict(absl::StrCat("SLO in unknown pool ", slo.pool));
  chargeback_.PutSlo(slo);
  return absl::OkStatus();
}

absl::Status State::LoadRequest(CapacityRequest request) {
  // A key recurs only once its earlier request has ended and been
  // forgotten; a store loads ended requests oldest first, so the latest
  // use of a key wins.
  const IdempotencyEntry* seen = FindIdempotencyKey(request.spec.idempotency_key);
  if (request.id <= 0 || (seen != nullptr && !seen->ended) || FindLiveRequest(request.id)) {
    return Conflict(absl::StrCat("bad or duplicate request ", request.id));
  }
  // A MIG request keeps the charge it was decided with; rows stored without
  // one are priced from the catalog.
  if (!IsFinal(request.state) && request.spec.shape.is_mig() &&
      request.spec.shape.mig().milli == 0) {
    absl::StatusOr<int64_t> milli = MigMilli(request.spec);
    if (!milli.ok())
      return Conflict(absl::StrCat("request ", request.id, ": ", milli.status().message()));
    std::get<MigShape>(request.spec.shape.gpu).milli = *milli;
  }
  requests_.SeeId(request.id);
  // What the request cost (or, while it runs, is projected to) counts
  // against the month it was admitted in.
  if (request.cost_micros != 0 && request.admitted_at != absl::InfinitePast()) {
    AddSpend(request.spec.team, MonthStart(request.admitted_at), request.cost_micros);
  }
  if (!IsFinal(request.state)) ObserveDemand(request.spec);
  for (Placement& p : request.placements) p.workload_class = request.spec.workload_class;
  if (HoldsCapacity(request.state)) {
    for (const Placement& placed : request.placements) {
      // The stored GPU layouts are the truth: a placement's layout change was
      // written to them when it was decided.
      Placement p = placed;
      p.mig_new_layout.clear();
      p.mig_layout_cleared = false;
      if (absl::Status fits = inventory_.CheckFits(p); !fits.ok()) {
        return Conflict(absl::StrCat("request ", request.id, ": ", fits.message()));
      }
      ApplyPlacement(p, +1);
    }
  }
  PutRequest(request);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> State::MigMilli(const CapacityRequestSpec& spec) const {
  const std::string& name = spec.shape.mig().profile;
  int64_t milli = 0;
  auto consider = [&](const GpuModel& model) {
    if (const MigProfile* p = FindMigProfile(model.mig_profiles, name)) {
      milli = std::max(milli, core::MigMilli(model.mig_profiles, *p));
    }
  };
  if (spec.gpu_models.empty()) {
    for (const auto& [model_name, model] : gpu_models()) consider(model);
  } else {
    for (const std::string& m : spec.gpu_models) {
      if (const GpuModel* model = FindGpuModel(m)) consider(*model);
    }
  }
  if (milli == 0) {
    return absl::NotFoundError(
        absl::StrCat("shape.mig_profile: no allowed GPU model has MIG "
                     "profile '",
                     name, "'"));
  }
  return milli;
}

void State::ObserveDemand(const CapacityRequestSpec& spec) {
  packing_.Observe(spec, [this] {
    ClusterCapacity cluster;
    std::map<std::tuple<std::string, int32_t, int64_t, int64_t>, int64_t> types;
    for (const Node& node : nodes()) {
      for (const Gpu& gpu : node.gpus) ++cluster.gpus_by_model[gpu.model];
      if (node.gpus.empty()) continue;
      types[{node.gpu_model(), static_cast<int32_t>(node.gpus.size()), node.cpu_milli,
             node.memory_mib}] += static_cast<int64_t>(node.gpus.size());
    }
    for (const auto& [t, gpus] : types) {
      cluster.node_types.push_back(
          {std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t), gpus});
    }
    return cluster;
  });
}

void State::ApplyPlacement(const Placement& p, int sign) {
  inventory_.ApplyPlacement(p, sign);
  if (sign < 0 || p.mig_layout_cleared || !p.mig_new_layout.empty()) {
    loosened_.insert(inventory_.FindNode(p.node_id)->pool);
  }
}

void State::PutRequest(const CapacityRequest& request) {
  if (const CapacityRequest* old = requests_.FindLive(request.id)) Charge(*old, -1);
  const absl::Time enforce_at = EnforceAt(request);
  if (enforce_at == request.enforce_at) {
    requests_.Put(request);
  } else {
    CapacityRequest enforced = request;
    enforced.enforce_at = enforce_at;
    requests_.Put(enforced);
  }
  if (!IsFinal(request.state)) Charge(request, +1);
}

absl::Time State::EnforceAt(const CapacityRequest& request) const {
  const Pool* pool = FindPool(request.spec.pool);
  if (request.state == RequestState::kPreempting) {
    // Held past the deadline while a claim's lease runs (renewals stop at
    // the deadline, so at most one lease past it).
    absl::Time at = request.preempt_deadline;
    if (pool != nullptr && pool->lease_seconds > 0 && !request.claims.empty()) {
      absl::Time lease_end = absl::InfiniteFuture();
      for (const Claim& c : request.claims) {
        lease_end = std::min(lease_end, c.renewed_at + absl::Seconds(pool->lease_seconds));
      }
      at = std::max(at, lease_end);
    }
    return at;
  }
  if (request.state != RequestState::kAdmitted) return absl::InfiniteFuture();
  // A burst ends when its time is up.
  absl::Time at =
      request.burst_until == absl::InfinitePast() ? absl::InfiniteFuture() : request.burst_until;
  if (pool == nullptr) return at;
  at = std::min(at, LendingEnds(*pool, request));
  if (pool->claim_deadline_seconds > 0 && request.admitted_at != absl::InfinitePast() &&
      request.claims.size() < static_cast<size_t>(request.spec.members)) {
    at = std::min(at, request.admitted_at + absl::Seconds(pool->claim_deadline_seconds));
  }
  if (pool->lease_seconds > 0) {
    for (const Claim& c : request.claims) {
      at = std::min(at, c.renewed_at + absl::Seconds(pool->lease_seconds));
    }
  }
  return at;
}

void State::ReleaseHolds(int64_t id) {
  const CapacityRequest* live = requests_.FindLive(id);
  if (live == nullptr) return;
  if (!live->holds.empty()) loosened_.insert(live->spec.pool);
  inventory_.SetHolds(live->holds, HoldWindow(*live), -1);
  requests_.ClearHolds(id);
}

void State::Charge(const CapacityRequest& request, int sign) {
  if (HoldsCapacity(request.state)) {
    quotas_.Charge(request.spec.team, request.spec.pool, request.quota_model,
                   sign * request.spec.total_gpu_milli());
    if (!power_.empty()) power_.Charge(PowerDraws(request.spec.pool, request.placements), sign);
  }
  inventory_.SetHolds(request.holds, HoldWindow(request), sign);
}

}  // namespace arbiter::core
