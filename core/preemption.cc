#include "core/preemption.h"

#include <algorithm>
#include <tuple>

#include "absl/types/span.h"

namespace arbiter::core {
namespace {

// Milli-GPU that `team`'s other requests in `pool` are taking back by
// reclaim: queued, waiting for victims to vacate.
int64_t ReclaimingMilli(const State& state, const CapacityRequest& request) {
  int64_t milli = 0;
  for (int64_t id : state.requests().WaitingIn(request.spec.pool)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (id == request.id || r.spec.team != request.spec.team) continue;
    if (!state.VictimsOf(id).empty()) milli += r.spec.total_gpu_milli();
  }
  return milli;
}

// Whether `request` may reclaim its team's lent quota: what the team holds,
// what it is already taking back, and the request stay within nominal.
// Counting what it is taking back keeps a burst of requests from reclaiming
// more than the team lent (and the cohort from reclaiming back and forth).
bool MayReclaim(const State& state, const CapacityRequest& request, const Flavor& flavor) {
  return WithinNominal(state, request.spec, *flavor.quota,
                       request.spec.total_gpu_milli() + ReclaimingMilli(state, request));
}

bool Eligible(const State& state, const CapacityRequest& request, const Flavor& flavor,
              bool may_reclaim, const CapacityRequest& victim, absl::Time now) {
  if (victim.id == request.id || victim.state != RequestState::kAdmitted) return false;
  if (victim.spec.guaranteed) return false;
  const CapacityRequestSpec& spec = request.spec;
  if (spec.start_at != absl::InfinitePast() && victim.declared_end() <= now) return true;
  if (!victim.spec.preemptible) return false;
  if (victim.spec.spot) return true;  // Any work that is not spot takes spot capacity.
  if (victim.spec.team == spec.team && victim.spec.priority < spec.priority) return true;
  if (victim.spec.team != spec.team && victim.quota_model == flavor.quota->gpu_model &&
      state.CohortOf(victim.spec.team) == state.CohortOf(spec.team) && may_reclaim) {
    const Quota* theirs = state.FindQuota(victim.spec.team, spec.pool, victim.quota_model);
    if (theirs != nullptr &&
        state.UsedMilli(victim.spec.team, spec.pool, victim.quota_model) > theirs->nominal_milli) {
      return true;
    }
  }
  // The pool's own classes take back what it lends to borrowing classes.
  const Pool* pool = state.FindPool(spec.pool);
  return pool != nullptr &&
         AdmissionAt(*pool, spec.workload_class, now) == ClassAdmission::kAdmit &&
         AdmissionOf(*pool, victim.spec.workload_class) == ClassAdmission::kBorrow;
}

// Frees `victims` in `trial`.
void Remove(State& trial, absl::Span<const int64_t> victims) {
  for (int64_t id : victims) {
    CapacityRequest v = *trial.FindLiveRequest(id);
    for (const Placement& p : v.placements) trial.ApplyPlacement(p, -1);
    v.state = RequestState::kPreempted;
    trial.PutRequest(v);
  }
}

// Puts `victims`, freed by Remove, back in `trial` as they are in `state`.
// REQUIRES: no victim holds a MIG instance (their placements' layout
// changes, done when they were admitted, are not redone).
void Restore(State& trial, const State& state, absl::Span<const int64_t> victims) {
  for (int64_t id : victims) {
    const CapacityRequest& v = *state.FindLiveRequest(id);
    for (Placement p : v.placements) {
      p.mig_layout_cleared = false;
      p.mig_new_layout.clear();
      trial.ApplyPlacement(p, +1);
    }
    trial.PutRequest(v);
  }
}

// Whether `request` fits `flavor`, `window` and the watt budgets in `trial`; the GPUs it would
// take are added to `claim` when given. `trial`'s charges are as they were
// on return (a MIG layout the trial placement chose on an empty GPU stays:
// the GPU is empty, so it may change again).
bool Fits(State& trial, const CapacityRequest& request, const Flavor& flavor, const Window& window,
          std::vector<GpuHold>* claim = nullptr) {
  const Quota* quota =
      trial.FindQuota(request.spec.team, request.spec.pool, flavor.quota->gpu_model);
  if (!CheckQuota(trial, request.spec, *quota, request.spec.total_gpu_milli()).ok) return false;
  CapacityRequestSpec narrowed = request.spec;
  narrowed.gpu_models = flavor.gpu_models;
  GangPlacement placed = PlaceGang(trial, narrowed, window);
  if (placed.result != FitResult::kPlaced) return false;
  // Freeing GPUs must free the watts too (docs/power.md).
  int64_t short_mw = 0;
  const bool over_power =
      !trial.power().empty() &&
      trial.power().Exceeded(trial.PowerDraws(request.spec.pool, placed.placements), &short_mw) !=
          nullptr;
  for (const Placement& p : placed.placements) {
    if (claim != nullptr && !over_power) {
      for (int32_t g : p.gpu_indices) claim->push_back(GpuHold{p.node_id, g});
    }
    trial.ApplyPlacement(p, -1);
  }
  return !over_power;
}

bool FitsWithout(const State& state, absl::Span<const int64_t> victims,
                 const CapacityRequest& request, const Flavor& flavor, const Window& window,
                 std::vector<GpuHold>* claim = nullptr) {
  State trial = state.CloneForPool(request.spec.pool);
  Remove(trial, victims);
  return Fits(trial, request, flavor, window, claim);
}

// Candidates as (not spot, lost work, priority, -id): spot first, then
// cheapest first.
using Candidates = std::vector<std::tuple<bool, int64_t, int32_t, int64_t>>;

// Whether MIG instances are in play: the request asks for one, or a
// candidate holds one.
bool InvolvesMig(const State& state, const CapacityRequest& request, const Candidates& candidates) {
  if (request.spec.shape.is_mig()) return true;
  for (const auto& c : candidates) {
    for (const Placement& p : state.FindLiveRequest(-std::get<3>(c))->placements) {
      if (!p.mig_profile.empty()) return true;
    }
  }
  return false;
}

// The length of the shortest prefix of `n` candidates whose removal lets the
// request fit, as `fits(k)` (the first k gone) says; 0 when none does, not
// even all n. Asks about prefixes of 1, 2, 4, ... candidates, then bisects
// between the last two: O(log n) questions where taking candidates one at a
// time asks as many as it takes. Assumes that taking more never stops a fit
// (true of capacity; the caller checks the plan it settles on).
template <typename FitsPrefix>
size_t ShortestFittingPrefix(size_t n, FitsPrefix&& fits) {
  if (n == 0) return 0;
  size_t short_of = 0;  // A prefix known not to fit (0: nothing taken).
  size_t enough = 0;
  for (size_t k = 1;; k = std::min(n, 2 * k)) {
    if (fits(k)) {
      enough = k;
      break;
    }
    short_of = k;
    if (k == n) return 0;
  }
  while (enough - short_of > 1) {
    const size_t mid = short_of + (enough - short_of) / 2;
    (fits(mid) ? enough : short_of) = mid;
  }
  return enough;
}

// A trial state with the first `taken` of `order` removed, moved to any
// prefix by removing or putting back the difference.
// REQUIRES: no candidate holds a MIG instance (Restore).
class TrialPrefix {
 public:
  TrialPrefix(State& trial, const State& state, const std::vector<int64_t>& order)
      : trial_(trial), state_(state), order_(order) {}
  void Take(size_t k) {
    const absl::Span<const int64_t> all(order_);
    if (k > taken_) Remove(trial_, all.subspan(taken_, k - taken_));
    if (k < taken_) Restore(trial_, state_, all.subspan(k, taken_ - k));
    taken_ = k;
  }

 private:
  State& trial_;
  const State& state_;
  const std::vector<int64_t>& order_;
  size_t taken_ = 0;
};

// Takes the shortest prefix of `order` (candidates cheapest first) whose
// removal lets the request fit, then puts back every victim it can do
// without, dearest first; empty when it never fits. `trial` is a copy of
// `state` and serves every step (Fits leaves its charges as they were),
// which is only sound without MIG instances: a trial placement may
// repartition an empty GPU that a victim would return to. When it returns
// victims, `trial` is `state` less them.
std::vector<int64_t> ChooseInPlace(State& trial, const State& state,
                                   const std::vector<int64_t>& order,
                                   const CapacityRequest& request, const Flavor& flavor,
                                   const Window& window) {
  TrialPrefix prefix(trial, state, order);
  const size_t needed = ShortestFittingPrefix(order.size(), [&](size_t k) {
    prefix.Take(k);
    return Fits(trial, request, flavor, window);
  });
  if (needed == 0) return {};
  prefix.Take(needed);
  std::vector<int64_t> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(needed));
  for (size_t i = chosen.size(); i-- > 0;) {
    Restore(trial, state, {chosen[i]});
    if (Fits(trial, request, flavor, window)) {
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      Remove(trial, {chosen[i]});
    }
  }
  return chosen;
}

// As ChooseInPlace, with a fresh copy of the state for every trial.
std::vector<int64_t> ChooseByCopies(const State& state, const std::vector<int64_t>& order,
                                    const CapacityRequest& request, const Flavor& flavor,
                                    const Window& window) {
  const size_t needed = ShortestFittingPrefix(order.size(), [&](size_t k) {
    return FitsWithout(state, absl::MakeConstSpan(order).first(k), request, flavor, window);
  });
  if (needed == 0) return {};
  std::vector<int64_t> chosen(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(needed));
  for (size_t i = chosen.size(); i-- > 0;) {
    std::vector<int64_t> without = chosen;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (FitsWithout(state, without, request, flavor, window)) chosen = std::move(without);
  }
  return chosen;
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
  if (request.spec.spot) return PreemptionPlan();  // Spot waits; it never preempts.
  Candidates candidates;
  const bool may_reclaim = MayReclaim(state, request, flavor);
  for (int64_t id : state.HoldingIn(request.spec.pool)) {
    const CapacityRequest& victim = *state.FindLiveRequest(id);
    if (!Eligible(state, request, flavor, may_reclaim, victim, now)) continue;
    candidates.emplace_back(!victim.spec.spot, LostWork(victim, now), victim.spec.priority, -id);
  }
  if (candidates.empty()) return PreemptionPlan();
  std::sort(candidates.begin(), candidates.end());
  std::vector<int64_t> order;
  for (const auto& c : candidates) order.push_back(-std::get<3>(c));
  PreemptionPlan plan;
  if (InvolvesMig(state, request, candidates)) {
    const std::vector<int64_t> chosen = ChooseByCopies(state, order, request, flavor, window);
    if (!chosen.empty() && FitsWithout(state, chosen, request, flavor, window, &plan.claim)) {
      plan.victims = chosen;
    }
    return plan;
  }
  // Without MIG instances one copy of the state serves every trial. Trials
  // place in the request's pool only, and free its victims, all holders in
  // it: a copy with the pool's live requests serves.
  State trial = state.CloneForPool(request.spec.pool);
  const std::vector<int64_t> chosen = ChooseInPlace(trial, state, order, request, flavor, window);
  if (!chosen.empty() && Fits(trial, request, flavor, window, &plan.claim)) {
    plan.victims = chosen;
  }
  return plan;
}

}  // namespace arbiter::core
