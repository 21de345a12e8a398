#include "core/preemption.h"

#include <algorithm>
#include <tuple>

namespace arbiter::core {
namespace {

bool Eligible(const State& state, const CapacityRequest& request, const Flavor& flavor,
              const CapacityRequest& victim, absl::Time now) {
  if (victim.id == request.id || victim.state != RequestState::kAdmitted) return false;
  if (victim.spec.guaranteed || !victim.spec.preemptible) return false;
  const CapacityRequestSpec& spec = request.spec;
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
  return spec.start_at != absl::InfinitePast() && victim.declared_end() <= now;
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

// Whether `request` fits `flavor` and `window` in `trial` (which it mutates).
bool Fits(State& trial, const CapacityRequest& request, const Flavor& flavor,
          const Window& window) {
  const Quota* quota =
      trial.FindQuota(request.spec.team, request.spec.pool, flavor.quota->gpu_model);
  if (!CheckQuota(trial, request.spec, *quota, request.spec.total_gpu_milli()).ok) return false;
  CapacityRequestSpec narrowed = request.spec;
  narrowed.gpu_models = flavor.gpu_models;
  return PlaceGang(trial, narrowed, window).result == FitResult::kPlaced;
}

bool FitsWithout(const State& state, const std::vector<int64_t>& victims,
                 const CapacityRequest& request, const Flavor& flavor, const Window& window) {
  State trial = state.Clone();
  Remove(trial, victims);
  return Fits(trial, request, flavor, window);
}

}  // namespace

int64_t LostWork(const CapacityRequest& victim, absl::Time now) {
  const int64_t run = std::max<int64_t>(0, absl::ToInt64Seconds(now - victim.admitted_at));
  const int64_t interval = victim.spec.checkpoint_interval_seconds;
  const int64_t since_checkpoint = interval > 0 ? run % interval : run;
  return victim.spec.total_gpu_milli() * (since_checkpoint + victim.spec.checkpoint_seconds);
}

std::vector<int64_t> ChooseVictims(const State& state, const CapacityRequest& request,
                                   const Flavor& flavor, const Window& window, absl::Time now) {
  std::vector<std::tuple<int64_t, int32_t, int64_t>> candidates;  // Lost work, priority, -id.
  for (int64_t id : state.HoldingIn(request.spec.pool)) {
    const CapacityRequest& victim = *state.FindLiveRequest(id);
    if (!Eligible(state, request, flavor, victim, now)) continue;
    candidates.emplace_back(LostWork(victim, now), victim.spec.priority, -id);
  }
  if (candidates.empty()) return {};
  std::sort(candidates.begin(), candidates.end());

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
  if (!fits) return {};
  // Put back every victim the request can do without, dearest first.
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<int64_t> without = chosen;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (FitsWithout(state, without, request, flavor, window)) chosen = std::move(without);
  }
  return chosen;
}

}  // namespace arbiter::core
