#include "core/preemption.h"

#include <algorithm>
#include <tuple>

namespace arbiter::core {
namespace {

bool Eligible(const State& state, const CapacityRequest& request, const Flavor& flavor,
              const CapacityRequest& victim, absl::Time now) {
  if (victim.id == request.id || victim.state != RequestState::kAdmitted) return false;
  if (victim.spec.guaranteed) return false;
  const CapacityRequestSpec& spec = request.spec;
  if (spec.start_at != absl::InfinitePast() && victim.declared_end() <= now) return true;
  if (!victim.spec.preemptible) return false;
  if (victim.spec.team == spec.team && victim.spec.priority < spec.priority) return true;
  if (victim.spec.team != spec.team && victim.quota_model == flavor.quota->gpu_model &&
      state.CohortOf(victim.spec.team) == state.CohortOf(spec.team) &&
      WithinNominal(state, spec, *flavor.quota, spec.total_gpu_milli())) {
    const Quota* theirs = state.FindQuota(victim.spec.team, spec.pool, victim.quota_model);
    if (theirs != nullptr &&
        state.UsedMilli(victim.spec.team, spec.pool, victim.quota_model) > theirs->nominal_milli) {
      return true;
    }
  }
  const Pool* pool = state.FindPool(spec.pool);
  if (pool != nullptr && pool->latency_class == LatencyClass::kServing &&
      spec.workload_class == WorkloadClass::kInference &&
      victim.spec.workload_class != WorkloadClass::kInference) {
    return true;
  }
  return false;
}

// Frees `victims` in `trial`.
void Remove(State& trial, const std::vector<int64_t>& victims) {
  for (int64_t id : victims) {
    CapacityRequest v = *trial.FindLiveRequest(id);
    for (const Placement& p : v.placements) trial.ApplyPlacement(p, -1);
    v.state = RequestState::kPreempted;
    trial.PutRequest(v);
  }
}

// Whether `request` fits `flavor` and `window` in `trial` (which it mutates);
// the GPUs it would take are added to `claim` when given.
bool Fits(State& trial, const CapacityRequest& request, const Flavor& flavor, const Window& window,
          std::vector<GpuHold>* claim = nullptr) {
  const Quota* quota =
      trial.FindQuota(request.spec.team, request.spec.pool, flavor.quota->gpu_model);
  if (!CheckQuota(trial, request.spec, *quota, request.spec.total_gpu_milli()).ok) return false;
  CapacityRequestSpec narrowed = request.spec;
  narrowed.gpu_models = flavor.gpu_models;
  GangPlacement placed = PlaceGang(trial, narrowed, window);
  if (placed.result != FitResult::kPlaced) return false;
  if (claim != nullptr) {
    for (const Placement& p : placed.placements) {
      for (int32_t g : p.gpu_indices) claim->push_back(GpuHold{p.node_id, g});
    }
  }
  return true;
}

bool FitsWithout(const State& state, const std::vector<int64_t>& victims,
                 const CapacityRequest& request, const Flavor& flavor, const Window& window,
                 std::vector<GpuHold>* claim = nullptr) {
  State trial = state.Clone();
  Remove(trial, victims);
  return Fits(trial, request, flavor, window, claim);
}

}  // namespace

int64_t LostWork(const CapacityRequest& victim, absl::Time now) {
  const int64_t run = std::max<int64_t>(0, absl::ToInt64Seconds(now - victim.admitted_at));
  const int64_t interval = victim.spec.checkpoint_interval_seconds;
  const int64_t since_checkpoint = interval > 0 ? run % interval : run;
  return victim.spec.total_gpu_milli() * (since_checkpoint + victim.spec.checkpoint_seconds);
}

PreemptionPlan ChooseVictims(const State& state, const CapacityRequest& request,
                             const Flavor& flavor, const Window& window, absl::Time now) {
  std::vector<std::tuple<int64_t, int32_t, int64_t>> candidates;  // Lost work, priority, -id.
  for (int64_t id : state.HoldingIn(request.spec.pool)) {
    const CapacityRequest& victim = *state.FindLiveRequest(id);
    if (!Eligible(state, request, flavor, victim, now)) continue;
    candidates.emplace_back(LostWork(victim, now), victim.spec.priority, -id);
  }
  if (candidates.empty()) return PreemptionPlan();
  std::sort(candidates.begin(), candidates.end());
  // Hopeless unless it fits with every candidate gone (one trial, not many).
  std::vector<int64_t> all;
  for (const auto& c : candidates) all.push_back(-std::get<2>(c));
  if (!FitsWithout(state, all, request, flavor, window)) return PreemptionPlan();

  // Cheapest first until the request fits.
  State trial = state.Clone();
  std::vector<int64_t> chosen;
  bool fits = false;
  for (const auto& [lost, priority, neg_id] : candidates) {
    chosen.push_back(-neg_id);
    Remove(trial, {-neg_id});
    State attempt = trial.Clone();
    if (Fits(attempt, request, flavor, window)) {
      fits = true;
      break;
    }
  }
  if (!fits) return PreemptionPlan();
  // Put back every victim the request can do without, dearest first.
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<int64_t> without = chosen;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (FitsWithout(state, without, request, flavor, window)) chosen = std::move(without);
  }
  PreemptionPlan plan;
  if (FitsWithout(state, chosen, request, flavor, window, &plan.claim)) plan.victims = chosen;
  return plan;
}

}  // namespace arbiter::core
