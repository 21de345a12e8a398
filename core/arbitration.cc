#include "core/arbitration.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

#include "core/approval.h"
#include "core/arbitration_internal.h"
#include "core/backfill.h"
#include "core/budget.h"
#include "core/fingerprint.h"
#include "core/model_sizing.h"
#include "core/placement.h"
#include "core/preemption.h"
#include "core/quota.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
absl::Status NotFound(absl::string_view field, absl::string_view what, absl::string_view name) {
  return absl::NotFoundError(absl::StrCat(field, ": unknown ", what, " '", name, "'"));
}

namespace {

// State-dependent checks of a request: referenced entities exist, and a
// fraction's memory fits at least one allowed GPU model.
absl::Status CheckReferences(const State& state, const CapacityRequestSpec& spec) {
  if (state.FindTeam(spec.team) == nullptr) return NotFound("team", "team", spec.team);
  if (state.FindPool(spec.pool) == nullptr) return NotFound("pool", "pool", spec.pool);
  int64_t max_memory = 0;
  std::string max_model;
  auto consider = [&](const GpuModel& m) {
    if (m.memory_mib > max_memory) {
      max_memory = m.memory_mib;
      max_model = m.name;
    }
  };
  for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
    const GpuModel* m = state.FindGpuModel(spec.gpu_models[i]);
    if (m == nullptr) {
      return NotFound(absl::StrCat("gpu_models[", i, "]"), "GPU model", spec.gpu_models[i]);
    }
    consider(*m);
  }
  if (spec.gpu_models.empty()) {
    for (const auto& [name, m] : state.gpu_models()) consider(m);
  }
  if (spec.shape.is_fraction() && spec.shape.fraction().memory_mib > max_memory) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape.fraction.memory_mib: ", spec.shape.fraction().memory_mib,
                     " MiB exceeds the memory of every allowed GPU model (largest: ", max_model,
                     " with ", max_memory, " MiB)"));
  }
  return absl::OkStatus();
}

// The time `spec` runs for when it starts at `now`.
Window RunWindow(const CapacityRequestSpec& spec, absl::Time now) {
  Window w;
  w.start = now;
  if (spec.duration > absl::ZeroDuration()) w.end = now + spec.duration;
  return w;
}

}  // namespace

void SetOutcome(CapacityRequest& request, RequestState state, absl::string_view code,
                std::string reason) {
  request.state = state;
  request.reason_code = std::string(code);
  request.reason = std::move(reason);
}

namespace {

// Takes back placements PlaceGang applied to `state` (a MIG layout it chose
// on an empty GPU stays: the GPU is empty, so it may change again).
void Unplace(State& state, const std::vector<Placement>& placements) {
  for (const Placement& p : placements) state.ApplyPlacement(p, -1);
}

// The live requests that `preemptor` is waiting on to vacate.
std::vector<const CapacityRequest*> PendingVictims(const State& state,
                                                   const CapacityRequest& preemptor) {
  std::vector<const CapacityRequest*> out;
  for (int64_t id : state.VictimsOf(preemptor.id)) out.push_back(state.FindLiveRequest(id));
  return out;
}

std::string WaitingText(const std::vector<const CapacityRequest*>& victims) {
  std::vector<int64_t> ids;
  absl::Time deadline = absl::InfinitePast();
  for (const CapacityRequest* v : victims) {
    ids.push_back(v->id);
    deadline = std::max(deadline, v->preempt_deadline);
  }
  return absl::StrCat("waiting for request", ids.size() == 1 ? " " : "s ", absl::StrJoin(ids, ", "),
                      " to vacate (deadline ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", deadline, absl::UTCTimeZone()), ")");
}

// Tells `victims` to vacate for `preemptor` by their grace deadlines.
void StartPreemption(State& state, const CapacityRequest& preemptor,
                     const std::vector<int64_t>& victims, absl::Time now, ChangeSet& changes) {
  const Pool& pool = *state.FindPool(preemptor.spec.pool);
  for (int64_t id : victims) {
    CapacityRequest v = *state.FindLiveRequest(id);
    const int64_t grace = GraceOf(pool, v);
    v.state = RequestState::kPreempting;
    v.preempt_deadline = now + absl::Seconds(grace);
    v.preempted_by = preemptor.id;
    v.updated_at = now;
    if (v.spec.spot) {
      v.reason_code = kReasonSpotReclaimed;
      v.reason = absl::StrCat("request ", preemptor.id, " of team ", preemptor.spec.team,
                              " takes the spot capacity in pool ", preemptor.spec.pool);
    } else if (v.spec.team == preemptor.spec.team && v.spec.priority < preemptor.spec.priority) {
      v.reason_code = kReasonPreemptedByPriority;
      v.reason = absl::StrCat("request ", preemptor.id, " of team ", preemptor.spec.team,
                              " has priority ", preemptor.spec.priority, " over ", v.spec.priority);
    } else {
      v.reason_code = kReasonReclaimed;
      v.reason = absl::StrCat("request ", preemptor.id, " of team ", preemptor.spec.team,
                              " takes back capacity in pool ", preemptor.spec.pool);
    }
    absl::StrAppend(&v.reason, "; vacate within ", grace, " s");
    state.PutRequest(v);
    changes.changes.emplace_back(RequestWrite{std::move(v), /*is_new=*/false});
  }
}

// Charges the projected cost of newly admitted `request` to its team's
// month; beyond the soft limit the decision carries a warning.
void ChargeBudget(State& state, CapacityRequest& request, absl::Time now) {
  const std::string& team = request.spec.team;
  const int64_t spent = state.Spend(team, MonthStart(now));
  request.cost_micros = PlacedCost(state, request, now, ProjectedEnd(request.spec, now));
  state.AddSpend(team, MonthStart(now), request.cost_micros);
  const Budget* budget = state.FindBudget(team);
  if (budget != nullptr && spent + request.cost_micros > budget->soft_limit_micros) {
    // After the admission's own note (a burst says so), if it has one.
    absl::StrAppend(&request.reason, request.reason.empty() ? "" : "; ", "budget warning: team ",
                    team, " has spent ", spent + request.cost_micros,
                    " micros this month, over its soft limit of ", budget->soft_limit_micros);
  }
}

}  // namespace

// Settles the cost of `request`, which stops holding capacity at `now`: the
// projection charged at admission becomes the cost actually incurred.
void SettleCost(State& state, CapacityRequest& request, absl::Time now) {
  if (request.admitted_at == absl::InfinitePast()) return;
  // A reported run is what is charged (ReleaseRequest checked it).
  const bool ran = request.run_started_at != absl::InfinitePast();
  const int64_t actual =
      PlacedCost(state, request, ran ? request.run_started_at : request.admitted_at,
                 ran ? request.run_ended_at : now);
  state.AddSpend(request.spec.team, MonthStart(request.admitted_at), actual - request.cost_micros);
  request.cost_micros = actual;
}

// The seconds `victim` in `pool` gets to vacate: the spot grace for spot
// work, else the reclaim grace or its checkpoint time, whichever is longer.
int64_t GraceOf(const Pool& pool, const CapacityRequest& victim) {
  if (victim.spec.spot) return VictimGraceSeconds(pool, /*spot=*/true);
  return std::max(pool.reclaim_grace_seconds, victim.spec.checkpoint_seconds);
}

int64_t TellToVacate(const Pool& pool, CapacityRequest& victim, absl::string_view code,
                     absl::Time now) {
  const int64_t grace = GraceOf(pool, victim);
  victim.state = RequestState::kPreempting;
  victim.preempt_deadline = now + absl::Seconds(grace);
  victim.preempted_by = 0;
  victim.updated_at = now;
  victim.reason_code = std::string(code);
  return grace;
}

namespace {

// Withdraws the notices of `preemptor`'s victims that still hold capacity:
// it no longer needs them (it was admitted otherwise, or it is gone).
void WithdrawPreemption(State& state, const CapacityRequest& preemptor, absl::Time now,
                        ChangeSet& changes) {
  for (const CapacityRequest* pending : PendingVictims(state, preemptor)) {
    CapacityRequest v = *pending;
    v.state = RequestState::kAdmitted;
    v.preempt_deadline = absl::InfinitePast();
    v.preempted_by = 0;
    v.reason_code.clear();
    v.reason = absl::StrCat("preemption for request ", preemptor.id, " withdrawn");
    v.updated_at = now;
    state.PutRequest(v);
    changes.changes.emplace_back(RequestWrite{std::move(v), /*is_new=*/false});
  }
}

// Whether admitting `request` at `now` would take its team beyond its hard
// budget limit (by the ceiling estimate); `why` says by how much.
bool OverHardLimit(const State& state, const CapacityRequest& request, absl::Time now,
                   std::string* why) {
  const Budget* budget = state.FindBudget(request.spec.team);
  if (budget == nullptr) return false;
  const int64_t spent = state.Spend(request.spec.team, MonthStart(now));
  const int64_t estimate = CeilingCost(state, request.spec, now);
  if (spent + estimate <= budget->hard_limit_micros) return false;
  if (why != nullptr) {
    *why = absl::StrCat("team ", request.spec.team, " has spent ", spent, " of its hard limit ",
                        budget->hard_limit_micros,
                        " micros this month; the request projects up to ", estimate);
  }
  return true;
}

// The approvals `request` still needs at `now`.
std::vector<ApprovalNeed> NeedsOf(const State& state, const CapacityRequest& request,
                                  absl::Time now) {
  const int64_t need = request.spec.total_gpu_milli();
  bool borrowing = true;
  for (const Flavor& f : FlavorsOf(state, request.spec)) {
    if (WithinNominal(state, request.spec, *f.quota, need)) borrowing = false;
  }
  const Budget* budget = state.FindBudget(request.spec.team);
  const bool over_budget = budget != nullptr && budget->over == OverBudget::kApproval &&
                           OverHardLimit(state, request, now, nullptr);
  return ApprovalsNeeded(state, request, borrowing, over_budget, now);
}

// Holds `request` for the approvals it still needs: PENDING_APPROVAL naming
// who may give them (deadline set when it starts waiting), or DENIED when
// nobody may or the budget denies it. Returns true when nothing is missing.
bool ApprovalGate(const State& state, CapacityRequest& request, absl::Time now) {
  const int64_t need = request.spec.total_gpu_milli();
  std::string budget_why;
  const Budget* budget = state.FindBudget(request.spec.team);
  if (budget != nullptr && budget->over == OverBudget::kDeny &&
      OverHardLimit(state, request, now, &budget_why)) {
    SetOutcome(request, RequestState::kDenied, kReasonBudgetExceeded, budget_why);
    return false;
  }
  const std::vector<ApprovalNeed> needs = NeedsOf(state, request, now);
  request.approvers.clear();
  if (needs.empty()) return true;
  std::vector<std::string> actions;
  for (const ApprovalNeed& n : needs) {
    actions.emplace_back(ApprovalActionName(n.action));
    if (n.approvers.empty()) {
      SetOutcome(request, RequestState::kDenied, kReasonNoAuthority,
                 absl::StrCat("needs approval (", ApprovalActionName(n.action), ") for ", need,
                              " milli-GPU in pool ", request.spec.pool,
                              ", and no declared authority may give it"));
      return false;
    }
    for (const std::string& a : n.approvers) {
      if (std::find(request.approvers.begin(), request.approvers.end(), a) ==
          request.approvers.end()) {
        request.approvers.push_back(a);
      }
    }
  }
  if (request.state != RequestState::kPendingApproval) {
    request.approval_deadline = now + state.approval_timeout();
  }
  SetOutcome(request, RequestState::kPendingApproval, kReasonNeedsApproval,
             absl::StrCat("needs approval (", absl::StrJoin(actions, ", "),
                          ") by one of: ", absl::StrJoin(request.approvers, ", "), "; until ",
                          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", request.approval_deadline,
                                           absl::UTCTimeZone())));
  return false;
}

// Admits `request`, which its quota holds back, above the quota into its
// pool's headroom when it asks to burst and the headroom of the models it
// lands on has room left beside the other bursts. True when admitted: the
// burst ends at `burst_until` and is charged at the burst price.
bool TryBurst(State& state, CapacityRequest& request, const std::vector<Flavor>& flavors,
              const Window& window, absl::Time now, ChangeSet& changes) {
  const CapacityRequestSpec& spec = request.spec;
  if (spec.burst_seconds == 0) return false;
  const Pool& pool = *state.FindPool(spec.pool);
  for (const Flavor& flavor : flavors) {
    CapacityRequestSpec narrowed = spec;
    narrowed.gpu_models.clear();
    for (const Headroom& h : pool.headroom) {
      if (flavor.gpu_models.empty() || absl::c_linear_search(flavor.gpu_models, h.gpu_model)) {
        narrowed.gpu_models.push_back(h.gpu_model);
      }
    }
    if (narrowed.gpu_models.empty()) continue;
    GangPlacement placed = PlaceGang(state, narrowed, window);
    if (placed.result != FitResult::kPlaced) continue;
    bool fits = true;
    for (const auto& [model, milli] : MilliByModel(state, placed.placements)) {
      fits = fits && BurstingMilli(state, spec.pool, model) + milli <= HeadroomOf(pool, model);
    }
    if (!fits || !PowerShortfall(state, spec.pool, placed.placements).empty()) {
      Unplace(state, placed.placements);
      continue;
    }
    request.burst_until = now + absl::Seconds(spec.burst_seconds);
    SetOutcome(request, RequestState::kAdmitted, "",
               absl::StrCat("burst above quota into pool ", spec.pool, "'s headroom until ",
                            absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", request.burst_until,
                                             absl::UTCTimeZone())));
    request.placements = std::move(placed.placements);
    request.quota_model = flavor.quota->gpu_model;
    request.admitted_at = now;
    ChargeBudget(state, request, now);
    WithdrawPreemption(state, request, now, changes);
    return true;
  }
  return false;
}

// Decides a request that is new or waiting, running from `now`: ADMITTED
// (placements charged to `state`), QUEUED (with the first reason that holds
// it back, possibly after telling victims to vacate), or DENIED (when no
// quota and no node could ever take it). Victims told to vacate are appended
// to `changes`; `request` itself is not.
void DecideNow(State& state, CapacityRequest& request, absl::Time now, ChangeSet& changes) {
  const CapacityRequestSpec& spec = request.spec;
  request.placements.clear();
  // A claim made while waiting for victims is lifted for the decision and
  // kept only while the wait goes on.
  std::vector<GpuHold> claim;
  if (!request.holds.empty()) {
    claim = std::move(request.holds);
    request.holds.clear();
    state.ReleaseHolds(request.id);
  }
  request.planned_start = absl::InfinitePast();  // Passes plan heads (QueuePolicy::Consider).
  if (!PoolAdmitsClass(state, request, now)) return;
  const Pool& pool = *state.FindPool(spec.pool);
  const std::vector<Flavor> flavors = FlavorsOf(state, spec);
  if (flavors.empty()) {
    SetOutcome(request, RequestState::kDenied, kReasonNoQuota,
               absl::StrCat("team ", spec.team, " has no quota in pool ", spec.pool,
                            spec.gpu_models.empty()
                                ? std::string()
                                : absl::StrCat(" for ", absl::StrJoin(spec.gpu_models, "|"))));
    return;
  }
  if (!ApprovalGate(state, request, now)) return;
  const int64_t need = spec.total_gpu_milli();
  const Window window = RunWindow(spec, now);
  // The first reason found, preferring one that may pass over one that never will.
  std::string code, why;
  bool all_never = true;
  // A placement was found but a watt budget or a serving forecast held it
  // back: preempting would not help.
  bool held_back = false;
  auto note = [&](bool never, std::string c, std::string w) {
    if (code.empty() || (all_never && !never)) {
      code = std::move(c);
      why = std::move(w);
    }
    all_never = all_never && never;
  };
  for (const Flavor& flavor : flavors) {
    QuotaCheck check = CheckQuota(state, spec, *flavor.quota, need);
    if (!check.ok) {
      note(check.never, std::move(check.reason_code), std::move(check.reason));
      continue;
    }
    CapacityRequestSpec narrowed = spec;
    narrowed.gpu_models = flavor.gpu_models;
    GangPlacement placed = PlaceGang(state, narrowed, window);
    if (placed.result == FitResult::kPlaced) {
      std::string taken = HeadroomTaken(state, pool, spec, placed.placements, now);
      if (!taken.empty()) {
        Unplace(state, placed.placements);
        note(false, kReasonHeadroom, std::move(taken));
        continue;
      }
      std::string forecast = ForecastTaken(state, pool, spec, now);
      if (!forecast.empty()) {
        Unplace(state, placed.placements);
        note(false, kReasonForecast, std::move(forecast));
        held_back = true;
        continue;
      }
      std::string power = PowerShortfall(state, spec.pool, placed.placements);
      if (!power.empty()) {
        Unplace(state, placed.placements);
        note(false, kReasonPower, std::move(power));
        held_back = true;
        continue;
      }
      SetOutcome(request, RequestState::kAdmitted, "", "");
      request.placements = std::move(placed.placements);
      request.quota_model = flavor.quota->gpu_model;
      request.admitted_at = now;
      ChargeBudget(state, request, now);
      WithdrawPreemption(state, request, now, changes);
      return;
    }
    const bool never = placed.result == FitResult::kNever;
    note(never, never ? kReasonNoFeasibleNode : kReasonInsufficientCapacity, std::move(placed.why));
  }
  if (TryBurst(state, request, flavors, window, now, changes)) return;
  if (all_never) {
    SetOutcome(request, RequestState::kDenied, code, why);
    WithdrawPreemption(state, request, now, changes);
    return;
  }
  if (held_back) {
    // Preempting would free GPUs, not necessarily watts, nor give the
    // forecast what it needs: it waits.
    SetOutcome(request, RequestState::kQueued, code, why);
    WithdrawPreemption(state, request, now, changes);
    return;
  }
  const std::vector<const CapacityRequest*> pending = PendingVictims(state, request);
  if (!pending.empty()) {
    SetOutcome(request, RequestState::kQueued, kReasonPreempting, WaitingText(pending));
    request.holds = std::move(claim);
    return;
  }
  for (const Flavor& flavor : flavors) {
    if (CheckQuota(state, spec, *flavor.quota, need).never) continue;
    PreemptionPlan plan = ChooseVictims(state, request, flavor, window, now);
    if (plan.victims.empty()) continue;
    StartPreemption(state, request, plan.victims, now, changes);
    SetOutcome(request, RequestState::kQueued, kReasonPreempting,
               WaitingText(PendingVictims(state, request)));
    request.holds = std::move(plan.claim);
    return;
  }
  SetOutcome(request, RequestState::kQueued, code, why);
}

// DecideNow, and marks the pool loosened (State::Loosened) when the
// decision may let a queued request in on a later pass that no freeing
// starts: an admission (it may create victims for a queued request of
// higher priority or of a team owed its quota, or lay out MIG instances),
// or a started reservation left waiting (work past its declared end
// becomes its victim as time passes).
void Decide(State& state, CapacityRequest& request, absl::Time now, ChangeSet& changes) {
  DecideNow(state, request, now, changes);
  const bool started_reservation_waits =
      request.state == RequestState::kQueued && request.spec.start_at != absl::InfinitePast();
  if (request.state == RequestState::kAdmitted || started_reservation_waits) {
    state.MarkLoosened(request.spec.pool);
  }
}

// The order AdmitQueued decides a pool's queue in: those waiting for their
// victims first, then higher priority, then the team with the lower fair
// share along the cohort tree (DominantShare, taken at the start of the
// pass), then the team that used less of what it held recently (measured
// usage per weight), then the oldest.
// As (not waiting, -priority, share, measured share, id).
using QueueOrder = std::tuple<bool, int32_t, FairShare, int64_t, int64_t>;

// Team -> (dominant share, measured share), computed once per pass.
class PassShares {
 public:
  PassShares(const State& state, const std::string& pool) : state_(state), pool_(pool) {}
  QueueOrder OrderOf(const CapacityRequest& r) {
    auto [it, fresh] = shares_.try_emplace(r.spec.team);
    if (fresh) {
      it->second = {DominantShare(state_, r.spec.team, pool_), MeasuredShare(state_, r.spec.team)};
    }
    return {r.reason_code != kReasonPreempting, -r.spec.priority, it->second.first,
            it->second.second, r.id};
  }

 private:
  const State& state_;
  const std::string& pool_;
  std::map<std::string, std::pair<FairShare, int64_t>> shares_;
};

// Whether `r`, just decided, waits for capacity alone: queued for room in
// its pool, not for its quota, an approval, its victims or its window.
bool WaitsForCapacity(const CapacityRequest& r) {
  return r.state == RequestState::kQueued && r.reason_code == kReasonInsufficientCapacity &&
         r.holds.empty() && r.spec.start_at == absl::InfinitePast();
}

// kBackfill: the oldest request of `pool` that waited for capacity when it
// was last decided and has waited longer than the starvation limit; 0 when
// none. Walks the queue oldest first and stops at the first request younger
// than the limit.
int64_t StarvedIn(const State& state, const Pool& pool, absl::Time now) {
  if (pool.queueing != QueueingPolicy::kBackfill || pool.starvation_limit_seconds == 0) return 0;
  const absl::Time cutoff = now - absl::Seconds(pool.starvation_limit_seconds);
  for (int64_t id : state.QueuedIn(pool.name)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (r.created_at > cutoff) break;
    if (r.reason_code == kReasonInsufficientCapacity && r.spec.start_at == absl::InfinitePast()) {
      return id;
    }
  }
  return 0;
}

// What one pass over a pool's queue does by the pool's policy
// (Pool::queueing): under backfill it makes the first request of the pass
// that waits for capacity the head and plans it (PlanHead), and names the
// starved request the pass decides first; under strict it stops the pass
// at the first request that waits for capacity. Best-effort does neither.
class QueuePolicy {
 public:
  // Under backfill, lifts the plan of the pool's head as the pass begins,
  // so that the requests before it in order are decided without it and the
  // head is chosen afresh; the plan is kept for reuse (Consider). The pass
  // decides every request the lifted GPUs may let in, so lifting them does
  // not loosen the pool.
  QueuePolicy(State& state, const std::string& pool, absl::Time now)
      : state_(state), pool_(*state.FindPool(pool)), now_(now) {
    const int64_t head = state_.HeadOf(pool_.name);
    if (pool_.queueing != QueueingPolicy::kBackfill || head == 0) return;
    const bool loosened = state_.Loosened(pool_.name);
    lifted_ = *state_.FindLiveRequest(head);
    state_.ReleaseHolds(head);
    if (!loosened) state_.ClearLoosened(pool_.name);
  }

  // The starved request (StarvedIn), which the pass decides first so that
  // it becomes the head; 0 when none.
  int64_t Starved() const { return StarvedIn(state_, pool_, now_); }

  // Called on `request`, decided from `before` and not yet stored. Under
  // backfill the first request of the pass that waits for capacity becomes
  // the head: it keeps the plan it had while that still holds (its start
  // has not passed and its GPUs are still in the pool), or is planned anew.
  void Consider(CapacityRequest& request) {
    if (pool_.queueing != QueueingPolicy::kBackfill || head_ != 0) return;
    if (!WaitsForCapacity(request)) return;
    head_ = request.id;
    HeadPlan plan;
    if (request.id == lifted_.id && !changed_ && StillHolds(lifted_)) {
      plan.start = lifted_.planned_start;
      plan.claim = lifted_.holds;
    } else {
      // Work ahead of the head may have taken its GPUs: its start is tried
      // first, on whichever GPUs it fits then.
      const absl::Time hint =
          request.id == lifted_.id ? lifted_.planned_start : absl::InfiniteFuture();
      plan = PlanHead(state_, request, now_, hint);
    }
    if (plan.claim.empty()) return;
    request.holds = std::move(plan.claim);
    request.planned_start = plan.start;
    if (plan.start == absl::InfiniteFuture()) {
      absl::StrAppend(&request.reason, "; head of the queue: ", request.holds.size(),
                      " GPUs held for it as their open-ended work ends");
    } else {
      absl::StrAppend(&request.reason, "; head of the queue: planned to start by ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", plan.start, absl::UTCTimeZone()),
                      " on ", request.holds.size(), " GPUs held for it from then");
    }
  }

  // Whether the pass stops after `id` was decided: under strict, when it
  // still waits for capacity (it is then the pool's strict head).
  bool Stops(int64_t id) {
    if (pool_.queueing != QueueingPolicy::kStrict) return false;
    const CapacityRequest* r = state_.FindLiveRequest(id);
    if (r == nullptr || !WaitsForCapacity(*r)) return false;
    state_.SetStrictHead(pool_.name, id);
    return true;
  }

  // Told of every decision of the pass: whether it changed the state.
  void Decided(bool changed) {
    if (head_ == 0 && changed) changed_ = true;
  }

  // The head of this pass; 0 until one is found.
  int64_t head() const { return head_; }
  // When `r` was planned to start as the pass began (its plan was lifted).
  absl::Time PlannedBefore(const CapacityRequest& r) const {
    return r.id == lifted_.id ? lifted_.planned_start : r.planned_start;
  }

 private:
  bool StillHolds(const CapacityRequest& before) const {
    if (!before.backfill_head()) return false;
    if (before.planned_start != absl::InfiniteFuture() && before.planned_start < now_) {
      return false;  // Something ran past its declared end.
    }
    for (const GpuHold& h : before.holds) {
      const Node* node = state_.FindNode(h.node_id);
      if (node == nullptr || node->pool != pool_.name ||
          h.gpu_index >= static_cast<int32_t>(node->gpus.size())) {
        return false;
      }
    }
    return true;
  }

  State& state_;
  const Pool& pool_;
  const absl::Time now_;
  CapacityRequest lifted_;  // The head as the pass began; id 0 when none.
  int64_t head_ = 0;
  bool changed_ = false;  // A decision before the head's changed the state.
};

// Whether the backfill head of `pool` is due to be chosen or planned again
// by a pass that no release would start: a request has waited past the
// starvation limit and is not the head, or the head's planned start has
// passed (something ran past its declared end).
bool HeadStale(const State& state, const std::string& pool, absl::Time now) {
  const int64_t head = state.HeadOf(pool);
  if (head != 0) {
    const absl::Time start = state.FindLiveRequest(head)->planned_start;
    if (start != absl::InfiniteFuture() && start < now) return true;
  }
  const int64_t starved = StarvedIn(state, *state.FindPool(pool), now);
  return starved != 0 && starved != head;
}

// Whether `a` comes before `b` in their pool's queue order.
bool ComesBefore(const State& state, const CapacityRequest& a, const CapacityRequest& b) {
  PassShares shares(state, a.spec.pool);
  return shares.OrderOf(a) < shares.OrderOf(b);
}

// The backfill head of new request `r`'s pool when `r` comes before it in
// the queue order; 0 otherwise.
int64_t HeadAfter(const State& state, const CapacityRequest& r) {
  const int64_t head = state.HeadOf(r.spec.pool);
  return head != 0 && ComesBefore(state, r, *state.FindLiveRequest(head)) ? head : 0;
}

// A strict pool's head while it still waits for capacity; nullptr otherwise.
const CapacityRequest* WaitingStrictHead(const State& state, const std::string& pool) {
  const int64_t head = state.StrictHeadOf(pool);
  const CapacityRequest* h = head == 0 ? nullptr : state.FindLiveRequest(head);
  return h != nullptr && WaitsForCapacity(*h) ? h : nullptr;
}

// Whether new request `r` of a strict pool comes after the pool's strict
// head, which still waits for capacity: it queues behind it undecided.
bool BehindStrictHead(const State& state, const CapacityRequest& r) {
  if (state.FindPool(r.spec.pool)->queueing != QueueingPolicy::kStrict) return false;
  const CapacityRequest* h = WaitingStrictHead(state, r.spec.pool);
  return h != nullptr && ComesBefore(state, *h, r);
}

// Whether new request `r` of a strict pool, just decided, is the pool's
// strict head: it waits for capacity, and the pool has none or `r` comes
// first.
bool TakesTheStrictHead(const State& state, const CapacityRequest& r) {
  if (state.FindPool(r.spec.pool)->queueing != QueueingPolicy::kStrict) return false;
  if (!WaitsForCapacity(r)) return false;
  const CapacityRequest* h = WaitingStrictHead(state, r.spec.pool);
  return h == nullptr || ComesBefore(state, r, *h);
}

// Ends admitted `request`, whose enforcement time (State::EnforceAt) has
// come: UNCLAIMED when members are still unclaimed past the pool's claim
// deadline, else LEASE_EXPIRED, ended (and charged) at the last renewal of
// the claim whose lease ran out. Its capacity returns; the caller admits
// the pool's queue and records the request.
void EndUnenforced(State& state, CapacityRequest& request, absl::Time now) {
  const Pool& pool = *state.FindPool(request.spec.pool);
  const bool unclaimed = request.claims.size() < static_cast<size_t>(request.spec.members);
  const bool burst_over = request.burst_until != absl::InfinitePast() && request.burst_until <= now;
  absl::Time end = now;
  if (burst_over) {
    end = request.burst_until;
    SetOutcome(request, RequestState::kReleased, kReasonBurstEnded,
               absl::StrCat("the burst above quota into pool ", pool.name,
                            "'s headroom ended after ", request.spec.burst_seconds, " s"));
  } else if (unclaimed) {
    SetOutcome(request, RequestState::kReleased, kReasonUnclaimed,
               absl::StrCat(request.spec.members - static_cast<int32_t>(request.claims.size()),
                            " of ", request.spec.members, " member(s) not claimed within ",
                            pool.claim_deadline_seconds, " s of admission"));
  } else {
    const Claim* expired = &request.claims.front();
    for (const Claim& c : request.claims) {
      if (c.renewed_at < expired->renewed_at) expired = &c;
    }
    end = std::min(now, expired->renewed_at);
    SetOutcome(request, RequestState::kReleased, kReasonLeaseExpired,
               absl::StrCat("the lease of ", expired->holder, " on member ", expired->member,
                            " was not renewed within ", pool.lease_seconds, " s"));
  }
  for (const Placement& p : request.placements) state.ApplyPlacement(p, -1);
  SettleCost(state, request, end);
  request.updated_at = end;
  state.PutRequest(request);
}

// Starts reclaiming admitted `request`, which a windowed class rule of its
// pool lent capacity until now (LendingEnds): PREEMPTING at the pool's
// grace, LENDING_WINDOW_CLOSED. Its capacity frees when it vacates.
void ReclaimLent(State& state, CapacityRequest& request, absl::Time now) {
  const Pool& pool = *state.FindPool(request.spec.pool);
  const PoolClassRule& rule = *ClassRuleOf(pool, request.spec.workload_class);
  const int64_t grace = TellToVacate(pool, request, kReasonLendingWindowClosed, now);
  request.reason =
      absl::StrCat("pool ", pool.name, " lends to ", WorkloadClassName(request.spec.workload_class),
                   " work only in the window '", FormatRecurringWindow(*rule.window),
                   "', which has closed; vacate within ", grace, " s");
  state.PutRequest(request);
}

// Ends preempting `request` whose time is up: PREEMPTED, its capacity
// freed. Without claims under a lease that is at its deadline, charged up to
// then; with them its enforcer neither confirmed (by releasing) nor kept the
// lease, so it is charged up to the stalest claim's last renewal.
void EndPreempted(State& state, CapacityRequest& request, absl::Time now) {
  const Pool& pool = *state.FindPool(request.spec.pool);
  absl::Time end = now;
  if (pool.lease_seconds > 0 && !request.claims.empty()) {
    const Claim* stalest = &request.claims.front();
    for (const Claim& c : request.claims) {
      if (c.renewed_at < stalest->renewed_at) stalest = &c;
    }
    end = std::max(std::min(now, stalest->renewed_at), request.admitted_at);
    absl::StrAppend(&request.reason, "; not confirmed by ", stalest->holder,
                    ", whose lease on member ", stalest->member, " ran out");
  }
  for (const Placement& p : request.placements) state.ApplyPlacement(p, -1);
  SettleCost(state, request, end);
  request.state = RequestState::kPreempted;
  request.updated_at = end;
  state.PutRequest(request);
}

// Re-decides queued request `id`; records it when its state or claim
// changed, or it starts or stops waiting for victims (a decision, written
// and ledgered), or else when only its explanation changed (in
// `changes.explained`). A backfill head's plan (QueuePolicy::Consider) is
// derived state, like the explanation: planning it anew is not a decision.
// Returns whether the decision left everything but the request's
// explanation and plan as it was: still queued, the same claim, nothing
// else changed. REQUIRES: `id` is live and queued.
bool Redecide(State& state, int64_t id, absl::Time now, ChangeSet& changes, QueuePolicy& policy) {
  const CapacityRequest before = *state.FindLiveRequest(id);
  CapacityRequest request = before;
  const size_t written = changes.changes.size();
  Decide(state, request, now, changes);
  policy.Consider(request);
  const bool same_outcome = request.state == before.state &&
                            (request.backfill_head() || request.holds == before.holds) &&
                            changes.changes.size() == written;
  policy.Decided(!same_outcome);
  const bool waits_for_victims = request.reason_code == kReasonPreempting;
  const bool decided =
      !same_outcome || waits_for_victims != (before.reason_code == kReasonPreempting);
  const bool explained = request.reason_code != before.reason_code ||
                         request.reason != before.reason ||
                         request.planned_start != policy.PlannedBefore(before);
  if (decided) request.updated_at = now;
  state.PutRequest(request);
  if (decided) {
    changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
  } else if (explained) {
    changes.explained.push_back({changes.changes.size(), std::move(request)});
  }
  return same_outcome;
}

// The oracle: re-decides every queued request of `pool`, in QueueOrder.
void AdmitQueuedByScan(State& state, const std::string& pool, absl::Time now, ChangeSet& changes) {
  if (state.QueuedIn(pool).empty()) return;
  QueuePolicy policy(state, pool, now);
  const int64_t starved = policy.Starved();
  if (starved != 0) Redecide(state, starved, now, changes, policy);
  const std::set<int64_t>& queued = state.QueuedIn(pool);
  PassShares shares(state, pool);
  std::vector<QueueOrder> order;
  for (int64_t id : queued) order.push_back(shares.OrderOf(*state.FindLiveRequest(id)));
  std::sort(order.begin(), order.end());
  for (const QueueOrder& o : order) {
    const int64_t id = std::get<4>(o);
    const CapacityRequest* live = state.FindLiveRequest(id);
    if (live == nullptr || live->state != RequestState::kQueued) continue;
    if (id == starved && policy.head() == starved) continue;  // Decided first.
    Redecide(state, id, now, changes, policy);
    if (policy.Stops(id)) return;
  }
}

// Re-decides the queue of `pool` in QueueOrder, as AdmitQueuedByScan does,
// deciding one request per group of alike ones (RequestBook::AdmissionKey)
// for as long as the state stays as it was: a request alike to one that
// just stayed queued, from the same state, would stay queued too. The pass
// walks the groups' heads in order; a group whose head stays queued is
// parked, and a decision that changes the state (an admission, a
// preemption, a denial) wakes the parked groups from their first member
// after it. So a pass costs a decision per group and per state change, not
// per queued request.
void AdmitQueuedGrouped(State& state, const std::string& pool, absl::Time now, ChangeSet& changes) {
  if (state.requests().QueueGroupsIn(pool).empty()) return;
  QueuePolicy policy(state, pool, now);
  const int64_t starved = policy.Starved();
  if (starved != 0) Redecide(state, starved, now, changes, policy);
  PassShares shares(state, pool);
  // The next member to decide of each group that is not parked, in
  // QueueOrder, with the group's key. The pass takes the first each time,
  // and what it adds sorts after it, so it walks the queue in order.
  std::map<QueueOrder, std::string> frontier;
  for (const auto& [key, ids] : state.requests().QueueGroupsIn(pool)) {
    frontier.emplace(shares.OrderOf(*state.FindLiveRequest(*ids.begin())), key);
  }
  // Queues `key`'s first member with an id above `after`, at the group's
  // place in the order (`at`, whose id is replaced).
  auto queue_next = [&](const std::string& key, const QueueOrder& place, int64_t after) {
    const auto& groups = state.requests().QueueGroupsIn(pool);  // Changes as requests move.
    auto group = groups.find(key);
    if (group == groups.end()) return;
    auto next = group->second.upper_bound(after);
    if (next == group->second.end()) return;
    QueueOrder at = place;
    std::get<4>(at) = *next;
    frontier.emplace(std::move(at), key);
  };
  // Groups whose last decided member stayed queued as it was, by key, with
  // that member's place. Their members alike from the same state are
  // skipped.
  std::map<std::string, QueueOrder> parked;
  while (!frontier.empty()) {
    auto first = frontier.begin();
    const QueueOrder at = first->first;
    const std::string key = std::move(first->second);
    frontier.erase(first);
    const int64_t id = std::get<4>(at);
    const bool decided_first = id == starved && policy.head() == starved;
    if (decided_first || Redecide(state, id, now, changes, policy)) {
      if (policy.Stops(id)) return;
      parked.emplace(key, at);
      continue;
    }
    if (policy.Stops(id)) return;
    // The state changed. A parked group sorts either wholly before this
    // place (a different team or priority: it is done) or, sharing all but
    // the id, around it: its members after this place decide again.
    auto same_but_id = [](const QueueOrder& a, const QueueOrder& b) {
      return std::get<0>(a) == std::get<0>(b) && std::get<1>(a) == std::get<1>(b) &&
             std::get<2>(a) == std::get<2>(b) && std::get<3>(a) == std::get<3>(b);
    };
    for (const auto& [parked_key, parked_at] : parked) {
      if (same_but_id(parked_at, at)) queue_next(parked_key, parked_at, id);
    }
    parked.clear();
    queue_next(key, at, id);
  }
}

}  // namespace

// Re-decides the queued requests of `pool` (see State::Admission).
void AdmitQueued(State& state, const std::string& pool, absl::Time now, ChangeSet& changes) {
  state.ClearLoosened(pool);
  state.SetStrictHead(pool, 0);
  if (state.admission() == State::Admission::kScan) {
    AdmitQueuedByScan(state, pool, now, changes);
  } else {
    AdmitQueuedGrouped(state, pool, now, changes);
  }
}

namespace {

// Holds GPUs for a request that starts later: RESERVED, or DENIED when no
// quota could take it or the pool has no room for the window.
void Reserve(State& state, CapacityRequest& request, absl::Time now) {
  const CapacityRequestSpec& spec = request.spec;
  if (!PoolAdmitsClass(state, request, std::max(now, spec.start_at))) return;
  const std::vector<Flavor> flavors = FlavorsOf(state, spec);
  if (flavors.empty()) {
    SetOutcome(request, RequestState::kDenied, kReasonNoQuota,
               absl::StrCat("team ", spec.team, " has no quota in pool ", spec.pool));
    return;
  }
  if (!ApprovalGate(state, request, now)) return;
  std::vector<std::string> models;
  std::string never_why;
  for (const Flavor& flavor : flavors) {
    QuotaCheck check = CheckQuota(state, spec, *flavor.quota, spec.total_gpu_milli());
    if (check.never) {
      never_why = std::move(check.reason);
      continue;
    }
    if (flavor.gpu_models.empty()) {
      models.clear();
      never_why.clear();
      break;
    }
    models.insert(models.end(), flavor.gpu_models.begin(), flavor.gpu_models.end());
  }
  if (!never_why.empty() && models.empty()) {
    SetOutcome(request, RequestState::kDenied, kReasonQuotaExceeded, never_why);
    return;
  }
  // Plan on the inventory as it will be at the start: work that declares an
  // end by then is gone; reservations that overlap the window hold their GPUs.
  Window window;
  window.start = spec.start_at;
  if (spec.duration > absl::ZeroDuration()) window.end = spec.start_at + spec.duration;
  // It places in the request's pool only: a copy with that pool's live
  // requests serves.
  State future = state.CloneForPool(spec.pool);
  for (int64_t id : state.HoldingIn(spec.pool)) {
    const CapacityRequest& live = *state.FindLiveRequest(id);
    if (live.declared_end() > spec.start_at) continue;
    CapacityRequest gone = live;
    for (const Placement& p : gone.placements) future.ApplyPlacement(p, -1);
    gone.state = RequestState::kReleased;
    future.PutRequest(gone);
  }
  CapacityRequestSpec narrowed = spec;
  narrowed.gpu_models = models;
  GangPlacement placed = PlaceGang(future, narrowed, window);
  if (placed.result != FitResult::kPlaced) {
    SetOutcome(request, RequestState::kDenied, kReasonReservationConflict,
               absl::StrCat("no room for the reservation's window: ", placed.why));
    return;
  }
  request.holds.clear();
  for (const Placement& p : placed.placements) {
    AppendHolds(p, request.holds);  // With the member's CPU and memory.
  }
  SetOutcome(
      request, RequestState::kReserved, kReasonReserved,
      absl::StrCat("holds ", request.holds.size(), " GPU(s) from ",
                   absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", window.start, absl::UTCTimeZone()),
                   window.end == absl::InfiniteFuture()
                       ? std::string(" until released")
                       : absl::StrCat(" to ", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", window.end,
                                                               absl::UTCTimeZone()))));
}

}  // namespace

absl::Status KeyUsedForAnotherBody(const std::string& key, int64_t request_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("idempotency_key: '", key, "' was used for request ", request_id,
                   " with a different body; use a new key for a different request"));
}

namespace {

// SeenIdempotencyKey, once the keys expired by `now` are forgotten.
absl::StatusOr<std::optional<int64_t>> SeenKey(const State& state, const CapacityRequestSpec& spec,
                                               uint64_t body_hash) {
  const IdempotencyEntry* seen = state.FindIdempotencyKey(spec.idempotency_key);
  if (seen == nullptr) return std::optional<int64_t>();
  if (seen->body_hash != body_hash)
    return KeyUsedForAnotherBody(spec.idempotency_key, seen->request_id);
  return std::optional<int64_t>(seen->request_id);
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> SeenIdempotencyKey(const State& state,
                                                          const CapacityRequestSpec& spec) {
  ARBITER_RETURN_IF_ERROR(ValidateRequestSpec(spec));
  return SeenKey(state, spec, FingerprintRequestSpec(spec));
}

namespace {

// Creates and decides the request of `spec`, whose key is new, recording it
// (and any victims) in `changes`.
absl::StatusOr<RequestOutcome> CreateRequest(State& state, const CapacityRequestSpec& spec,
                                             uint64_t body_hash, absl::Time now,
                                             ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateWindow(spec, now));
  CapacityRequest request;
  request.spec = spec;
  if (spec.model_profile.has_value()) {
    // The request names a model: choose the smallest form that holds it.
    if (state.FindPool(spec.pool) == nullptr) return NotFound("pool", "pool", spec.pool);
    ARBITER_ASSIGN_OR_RETURN(const int64_t memory_mib, ModelMemoryMib(*spec.model_profile));
    ARBITER_ASSIGN_OR_RETURN(request.spec.shape.gpu, ChooseGpuForm(state, spec, memory_mib));
  }
  ARBITER_RETURN_IF_ERROR(CheckReferences(state, request.spec));
  ARBITER_RETURN_IF_ERROR(NormalizeSpot(*state.FindPool(spec.pool), request.spec));
  ARBITER_RETURN_IF_ERROR(CheckBurst(*state.FindPool(spec.pool), request.spec, now));
  if (request.spec.shape.is_mig()) {
    ARBITER_ASSIGN_OR_RETURN(std::get<MigShape>(request.spec.shape.gpu).milli,
                             state.MigMilli(request.spec));
  }
  state.ObserveDemand(request.spec);
  request.id = state.TakeRequestId();
  request.body_hash = body_hash;
  request.created_at = now;
  request.updated_at = now;
  // Victims of a preemption are written before the request that caused it.
  ChangeSet victims;
  bool ahead_of_head = false;
  if (spec.start_at > now) {
    Reserve(state, request, now);
  } else if (const int64_t head = HeadAfter(state, request); head != 0) {
    // It comes before the backfill head: decided as a pass would, without
    // the head's plan, which the pass below makes again.
    state.ReleaseHolds(head);
    ahead_of_head = true;
    Decide(state, request, now, victims);
  } else if (BehindStrictHead(state, request)) {
    const int64_t head = state.StrictHeadOf(spec.pool);
    SetOutcome(request, RequestState::kQueued, kReasonQueuedBehind,
               absl::StrCat("pool ", spec.pool, " admits in strict order; request ", head,
                            " waits for capacity first"));
  } else {
    Decide(state, request, now, victims);
  }
  request.enforce_at = state.EnforceAt(request);
  state.PutRequest(request);
  // A new request that waits for capacity in a backfill pool without a
  // head is the head of the next pass, which a cancel would skip: mark the
  // pool. (One that came before the head is planned by the pass below; one
  // after it is not the head.) A strict pool's head is known at once.
  if (state.FindPool(spec.pool)->queueing == QueueingPolicy::kBackfill &&
      state.HeadOf(spec.pool) == 0 && WaitsForCapacity(request)) {
    state.MarkLoosened(spec.pool);
  }
  if (TakesTheStrictHead(state, request)) state.SetStrictHead(spec.pool, request.id);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/true});
  for (Change& c : victims.changes) changes.changes.push_back(std::move(c));
  if (ahead_of_head) {
    AdmitQueued(state, spec.pool, now, changes);
    if (const CapacityRequest* live = state.FindLiveRequest(request.id)) request = *live;
  }
  return RequestOutcome{std::move(request), /*replayed=*/false};
}

// The first occurrence of recurring `spec` that has not ended at `now`,
// from `now` when it is under way. INVALID_ARGUMENT naming `recurrence`
// when none is left.
absl::StatusOr<CapacityRequestSpec> FirstOccurrence(const CapacityRequestSpec& spec,
                                                    absl::Time now) {
  const std::optional<Interval> first = NextOccurrence(*spec.recurrence, now);
  if (!first.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recurrence: '", FormatRecurringWindow(*spec.recurrence), "' has no occurrence after ",
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", now, absl::UTCTimeZone())));
  }
  CapacityRequestSpec occurrence = spec;
  occurrence.start_at = std::max(first->start, now);
  occurrence.duration = first->end - occurrence.start_at;
  return occurrence;
}

}  // namespace

absl::StatusOr<RequestOutcome> RequestCapacity(State& state, const CapacityRequestSpec& spec,
                                               absl::Time now, ChangeSet& changes,
                                               absl::Time ended_keys_checked_at) {
  ARBITER_RETURN_IF_ERROR(ValidateRequestSpec(spec));
  const uint64_t body_hash = FingerprintRequestSpec(spec);
  state.ForgetExpiredKeys(now);
  ARBITER_ASSIGN_OR_RETURN(std::optional<int64_t> seen, SeenKey(state, spec, body_hash));
  if (seen.has_value()) {
    RequestOutcome replay;
    replay.request.id = *seen;
    replay.replayed = true;
    return replay;
  }
  if (!state.RemembersWholeWindow() && now - ended_keys_checked_at > state.key_lookup_max_age()) {
    return absl::UnavailableError(
        "idempotency_key: the lookup of the window's ended requests is out of date; retry");
  }
  if (!spec.recurrence.has_value()) return CreateRequest(state, spec, body_hash, now, changes);
  ARBITER_ASSIGN_OR_RETURN(const CapacityRequestSpec first, FirstOccurrence(spec, now));
  ARBITER_ASSIGN_OR_RETURN(RequestOutcome outcome,
                           CreateRequest(state, first, body_hash, now, changes));
  // One under way is decided now: the next is booked at once.
  if (first.start_at <= now) BookNextOccurrence(state, outcome.request, now, changes);
  return outcome;
}

void BookNextOccurrence(State& state, const CapacityRequest& started, absl::Time now,
                        ChangeSet& changes) {
  const CapacityRequestSpec& spec = started.spec;
  const std::optional<Interval> next =
      NextOccurrence(*spec.recurrence, spec.start_at + spec.duration);
  if (!next.has_value()) return;  // Past the window's `until`: the series ends.
  CapacityRequestSpec occurrence = spec;
  absl::string_view series = spec.idempotency_key;
  absl::ConsumeSuffix(&series, absl::StrCat("@", absl::ToUnixSeconds(spec.start_at)));
  occurrence.idempotency_key = absl::StrCat(series, "@", absl::ToUnixSeconds(next->start));
  occurrence.start_at = next->start;
  occurrence.duration = next->end - next->start;
  if (state.FindIdempotencyKey(occurrence.idempotency_key) != nullptr) return;  // Booked already.
  // Cannot fail: the spec was valid, and the occurrence starts after now.
  (void)CreateRequest(state, occurrence, FingerprintRequestSpec(occurrence), now, changes);
}

namespace {

// Whether `run` may be charged for `request` released at `now`.
absl::Status CheckRun(const CapacityRequest& request, const WorkloadRun& run, absl::Time now) {
  const bool started = run.started != absl::InfinitePast();
  const bool ended = run.ended != absl::InfinitePast();
  if (!started && !ended) return absl::OkStatus();
  if (!ended) {
    return absl::InvalidArgumentError("workload_ended_at: required with workload_started_at");
  }
  if (!started) {
    return absl::InvalidArgumentError("workload_started_at: required with workload_ended_at");
  }
  if (!HoldsCapacity(request.state) || request.admitted_at == absl::InfinitePast()) {
    return absl::InvalidArgumentError(absl::StrCat("workload_started_at: request ", request.id,
                                                   " holds no allocation to have run on"));
  }
  // Platforms record whole seconds: a second of slack at either end.
  const absl::Duration slack = absl::Seconds(1);
  if (run.ended < run.started) {
    return absl::InvalidArgumentError("workload_ended_at: before workload_started_at");
  }
  if (run.started < request.admitted_at - slack) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload_started_at: ", absl::FormatTime(run.started, absl::UTCTimeZone()),
                     " is before request ", request.id, " was admitted (",
                     absl::FormatTime(request.admitted_at, absl::UTCTimeZone()), ")"));
  }
  if (run.ended > now + slack) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload_ended_at: ", absl::FormatTime(run.ended, absl::UTCTimeZone()),
                     " is in the future"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CapacityRequest> ReleaseRequest(State& state, int64_t id, absl::Time now,
                                               ChangeSet& changes, const WorkloadRun& run) {
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", id));
  if (id >= state.next_request_id()) {
    return absl::NotFoundError(absl::StrCat("id: no request ", id));
  }
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("id: request ", id, " holds nothing (already released, cancelled or denied)"));
  }
  CapacityRequest request = *live;
  ARBITER_RETURN_IF_ERROR(CheckRun(request, run, now));
  // Cancelling a request that holds nothing (no placements, no claim, no
  // victims vacating for it) frees nothing another request waits for, so
  // the queue is re-decided only when something loosened the pool since
  // its last pass (State::Loosened), a backfill head is due again
  // (HeadStale), or in a strict pool (the request may have been the one
  // the queue waited behind); the scan re-decides on every event.
  const std::string& pool = request.spec.pool;
  const bool frees =
      HoldsCapacity(request.state) || !request.holds.empty() || !state.VictimsOf(id).empty() ||
      state.Loosened(pool) || state.admission() == State::Admission::kScan ||
      state.FindPool(pool)->queueing == QueueingPolicy::kStrict || HeadStale(state, pool, now);
  if (HoldsCapacity(request.state)) {
    for (const Placement& p : request.placements) state.ApplyPlacement(p, -1);
    if (run.started != absl::InfinitePast()) {
      request.run_started_at = run.started;
      request.run_ended_at = run.ended;
    }
    SettleCost(state, request, now);
    request.state = RequestState::kReleased;
  } else {
    request.state = RequestState::kCancelled;
    request.holds.clear();  // Its claim or plan goes with it (PutRequest lifts them).
    request.planned_start = absl::InfinitePast();
  }
  request.updated_at = now;
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
  WithdrawPreemption(state, request, now, changes);
  if (frees) AdmitQueued(state, request.spec.pool, now, changes);
  return request;
}

absl::Status SetCoexistenceRule(State& state, const ClassRule& rule, absl::Time now,
                                ChangeSet& changes) {
  if (rule.a == WorkloadClass::kUnspecified) {
    return absl::InvalidArgumentError("rule.class_a: must be set");
  }
  if (rule.b == WorkloadClass::kUnspecified) {
    return absl::InvalidArgumentError("rule.class_b: must be set");
  }
  CoexistenceMatrix matrix = state.coexistence();
  matrix.Set(rule.a, rule.b, rule.rule);
  state.set_coexistence(matrix);
  changes.changes.emplace_back(rule);
  std::set<std::string> pools;
  for (const auto& [id, r] : state.live_requests()) {
    if (r.state == RequestState::kQueued) pools.insert(r.spec.pool);
  }
  for (const std::string& pool : pools) AdmitQueued(state, pool, now, changes);
  return absl::OkStatus();
}

namespace {

// The PENDING_APPROVAL request `id`, or the error for it.
absl::StatusOr<CapacityRequest> PendingApproval(const State& state, int64_t id) {
  if (id <= 0) return absl::InvalidArgumentError(absl::StrCat("id: must be > 0, got ", id));
  if (id >= state.next_request_id()) {
    return absl::NotFoundError(absl::StrCat("id: no request ", id));
  }
  const CapacityRequest* live = state.FindLiveRequest(id);
  if (live == nullptr || live->state != RequestState::kPendingApproval) {
    return absl::FailedPreconditionError(
        absl::StrCat("id: request ", id, " is not waiting for approval"));
  }
  return *live;
}

// The approvals `request` still needs that `who` may give.
std::vector<ApprovalAction> GivableBy(const State& state, const CapacityRequest& request,
                                      const Approver& who, absl::Time now) {
  std::vector<ApprovalAction> out;
  for (const ApprovalNeed& n : NeedsOf(state, request, now)) {
    if (MayApprove(state, request, n.action, who, now)) out.push_back(n.action);
  }
  return out;
}

absl::Status NotAnApprover(const CapacityRequest& request, const Approver& who) {
  return absl::PermissionDeniedError(
      absl::StrCat(who.principal, " may not approve request ", request.id,
                   "; it waits for one of: ", absl::StrJoin(request.approvers, ", ")));
}

}  // namespace

absl::StatusOr<CapacityRequest> ApproveRequest(State& state, int64_t id, const Approver& who,
                                               absl::Time now, ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(CapacityRequest request, PendingApproval(state, id));
  const std::vector<ApprovalAction> givable = GivableBy(state, request, who, now);
  if (givable.empty()) return NotAnApprover(request, who);
  for (ApprovalAction a : givable) {
    request.approvals.push_back(absl::StrCat(ApprovalActionName(a), ":", who.principal));
  }
  ChangeSet victims;
  if (request.spec.start_at > now) {
    Reserve(state, request, now);
  } else {
    Decide(state, request, now, victims);
  }
  request.updated_at = now;
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
  for (Change& c : victims.changes) changes.changes.push_back(std::move(c));
  return request;
}

absl::StatusOr<CapacityRequest> DenyRequest(State& state, int64_t id, const Approver& who,
                                            const std::string& reason, absl::Time now,
                                            ChangeSet& changes) {
  ARBITER_ASSIGN_OR_RETURN(CapacityRequest request, PendingApproval(state, id));
  if (reason.empty()) return absl::InvalidArgumentError("reason: must say why");
  ARBITER_RETURN_IF_ERROR(ValidateDescription("reason", reason));
  if (GivableBy(state, request, who, now).empty()) return NotAnApprover(request, who);
  SetOutcome(request, RequestState::kDenied, kReasonDeniedByAuthority,
             absl::StrCat("denied by ", who.principal, ": ", reason));
  request.updated_at = now;
  state.PutRequest(request);
  changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
  return request;
}

void Tick(State& state, absl::Time now, ChangeSet& changes) {
  state.ForgetExpiredKeys(now);
  if (now >= state.heartbeat_check_at()) MarkUnreachable(state, now, changes);
  std::set<std::string> pools;
  while (!state.timers().empty() && state.timers().begin()->first <= now) {
    const int64_t id = state.timers().begin()->second;
    CapacityRequest request = *state.FindLiveRequest(id);
    request.updated_at = now;
    if (request.state == RequestState::kPreempting) {
      EndPreempted(state, request, now);
    } else if (request.state == RequestState::kAdmitted &&
               LendingEnds(*state.FindPool(request.spec.pool), request) <= now) {
      ReclaimLent(state, request, now);
      changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
      continue;
    } else if (request.state == RequestState::kAdmitted) {
      EndUnenforced(state, request, now);
    } else if (request.state == RequestState::kPendingApproval) {
      SetOutcome(request, RequestState::kDenied, kReasonApprovalExpired,
                 absl::StrCat("no approval by ", absl::StrJoin(request.approvers, ", "),
                              " before the deadline"));
      state.PutRequest(request);
      changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
      continue;
    } else {
      // A reservation starts: its holds go, and it is decided like a new
      // request (it may take back GPUs from work past its declared end).
      request.state = RequestState::kQueued;
      request.holds.clear();
      state.PutRequest(request);
      ChangeSet victims;
      Decide(state, request, now, victims);
      state.PutRequest(request);
      changes.changes.emplace_back(RequestWrite{request, /*is_new=*/false});
      for (Change& c : victims.changes) changes.changes.push_back(std::move(c));
      pools.insert(request.spec.pool);
      if (request.spec.recurrence.has_value()) BookNextOccurrence(state, request, now, changes);
      continue;
    }
    pools.insert(request.spec.pool);
    changes.changes.emplace_back(RequestWrite{std::move(request), /*is_new=*/false});
  }
  for (const std::string& pool : pools) AdmitQueued(state, pool, now, changes);
  if (now >= state.demand_sample_at()) ObserveServingDemand(state, now, changes);
}

absl::StatusOr<Node> RegisterNode(State& state, const Node& node, absl::Time now,
                                  ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateNode(node));
  if (!state.HasCluster(node.cluster)) return NotFound("node.cluster", "cluster", node.cluster);
  if (state.FindPool(node.pool) == nullptr) return NotFound("node.pool", "pool", node.pool);
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuModel* model = state.FindGpuModel(node.gpus[i].model);
    if (model == nullptr) {
      return NotFound(absl::StrCat("node.gpus[", i, "].model"), "GPU model", node.gpus[i].model);
    }
    if (!node.gpus[i].reported_mig.empty()) {
      ARBITER_RETURN_IF_ERROR(
          ApplyReportedPlacements(model->mig_profiles, node.gpus[i].reported_mig,
                                  absl::StrCat("node.gpus[", i, "].reported_mig_placements"))
              .status());
    }
  }
  if (state.FindNode(node.cluster, node.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("node.name: '", node.name, "' exists in cluster ", node.cluster));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    if (const auto* holder = state.FindGpuByUuid(node.gpus[i].uuid)) {
      return absl::AlreadyExistsError(absl::StrCat("node.gpus[", i, "].uuid: '", node.gpus[i].uuid,
                                                   "' is registered on node ", holder->first,
                                                   " as GPU ", holder->second));
    }
  }
  Node registered = node;
  registered.id = state.TakeNodeId();
  ARBITER_RETURN_IF_ERROR(state.LoadNode(registered));
  const Node& stored = *state.FindNode(registered.id);
  changes.changes.emplace_back(stored);
  AdmitQueued(state, node.pool, now, changes);
  return *state.FindNode(registered.id);
}

absl::Status SetQuota(State& state, const Quota& quota, absl::Time now, ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidateQuota(quota));
  if (state.FindTeam(quota.team) == nullptr) return NotFound("quota.team", "team", quota.team);
  if (state.FindPool(quota.pool) == nullptr) return NotFound("quota.pool", "pool", quota.pool);
  if (!quota.gpu_model.empty() && state.FindGpuModel(quota.gpu_model) == nullptr) {
    return NotFound("quota.gpu_model", "GPU model", quota.gpu_model);
  }
  ARBITER_RETURN_IF_ERROR(state.LoadQuota(quota));
  changes.changes.emplace_back(quota);
  AdmitQueued(state, quota.pool, now, changes);
  return absl::OkStatus();
}

namespace {

// `status` with its message's field prefix `from` (e.g. "quota.", as the
// validators name fields) replaced by the entry's `to` (e.g. "quotas[3].").
absl::Status Renamed(const absl::Status& status, absl::string_view from, absl::string_view to) {
  absl::string_view message = status.message();
  if (!absl::ConsumePrefix(&message, from)) return status;
  return absl::Status(status.code(), absl::StrCat(to, message));
}

// ImportOrganisation's checks of the teams: each valid, new or unchanged,
// given once, its parent known or given (in any order), and the new teams'
// parents forming no cycle. Fills `created` with the indexes of the teams to
// create, each after its parent.
absl::Status CheckImportedTeams(const State& state, const std::vector<Team>& teams,
                                std::vector<size_t>& created) {
  absl::flat_hash_map<std::string, size_t> fresh;  // New team -> index.
  absl::flat_hash_set<std::string> given;
  for (size_t i = 0; i < teams.size(); ++i) {
    const Team& t = teams[i];
    const std::string entry = absl::StrCat("teams[", i, "].");
    if (absl::Status valid = ValidateTeam(t); !valid.ok()) return Renamed(valid, "team.", entry);
    if (!given.insert(t.name).second) {
      return absl::AlreadyExistsError(absl::StrCat(entry, "name: '", t.name, "' is given twice"));
    }
    if (const Team* existing = state.FindTeam(t.name); existing != nullptr) {
      if (*existing == t) continue;
      return absl::AlreadyExistsError(absl::StrCat(
          entry, "name: '", t.name, "' exists with parent '", existing->parent, "' and weight ",
          existing->weight_milli, "; an import does not change existing teams"));
    }
    fresh.emplace(t.name, i);
  }
  for (size_t i = 0; i < teams.size(); ++i) {
    const Team& t = teams[i];
    if (!fresh.contains(t.name) || t.parent.empty()) continue;
    if (state.FindTeam(t.parent) == nullptr && !given.contains(t.parent)) {
      return NotFound(absl::StrCat("teams[", i, "].parent"), "team", t.parent);
    }
  }
  // Each new team after its parent: a depth-first walk up the new teams'
  // parents. A walk that meets a team it is still on has found a cycle
  // (existing teams never have a new parent, so a cycle is all new teams).
  enum class Mark { kNone, kOnPath, kDone };
  absl::flat_hash_map<std::string, Mark> mark;
  for (size_t i = 0; i < teams.size(); ++i) {
    if (!fresh.contains(teams[i].name)) continue;
    std::vector<size_t> path;
    for (size_t at = i;;) {
      Mark& m = mark[teams[at].name];
      if (m == Mark::kDone) break;
      if (m == Mark::kOnPath) {
        std::string cycle = teams[at].name;
        for (auto it = std::find(path.begin(), path.end(), at); it != path.end(); ++it) {
          absl::StrAppend(&cycle, " -> ", teams[*it].parent);
        }
        return absl::InvalidArgumentError(absl::StrCat(
            "teams[", at, "].parent: '", teams[at].parent, "' makes a cohort cycle: ", cycle));
      }
      m = Mark::kOnPath;
      path.push_back(at);
      auto parent = fresh.find(teams[at].parent);
      if (parent == fresh.end()) break;  // A root, or an existing parent.
      at = parent->second;
    }
    // The walk went child to parent: create in reverse.
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      Mark& m = mark[teams[*it].name];
      if (m == Mark::kDone) continue;
      m = Mark::kDone;
      created.push_back(*it);
    }
  }
  return absl::OkStatus();
}

// ImportOrganisation's checks of the quotas: each valid, of a known or
// imported team, a known pool and GPU model, given once. Fills `changed` with
// the indexes of the quotas that differ from those in force.
absl::Status CheckImportedQuotas(const State& state, const Organisation& org,
                                 std::vector<size_t>& changed) {
  absl::flat_hash_set<absl::string_view> imported_teams;
  for (const Team& t : org.teams) imported_teams.insert(t.name);
  absl::flat_hash_map<std::tuple<std::string, std::string, std::string>, size_t> given;
  for (size_t i = 0; i < org.quotas.size(); ++i) {
    const Quota& q = org.quotas[i];
    const std::string entry = absl::StrCat("quotas[", i, "].");
    if (absl::Status valid = ValidateQuota(q); !valid.ok()) return Renamed(valid, "quota.", entry);
    if (state.FindTeam(q.team) == nullptr && !imported_teams.contains(q.team)) {
      return NotFound(absl::StrCat(entry, "team"), "team", q.team);
    }
    if (state.FindPool(q.pool) == nullptr)
      return NotFound(absl::StrCat(entry, "pool"), "pool", q.pool);
    if (!q.gpu_model.empty() && state.FindGpuModel(q.gpu_model) == nullptr) {
      return NotFound(absl::StrCat(entry, "gpu_model"), "GPU model", q.gpu_model);
    }
    auto [it, fresh] = given.try_emplace(std::make_tuple(q.team, q.pool, q.gpu_model), i);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quotas[", i, "]: the same team, pool and GPU model as quotas[", it->second, "]"));
    }
    const Quota* existing = state.FindQuota(q.team, q.pool, q.gpu_model);
    if (existing == nullptr || !(*existing == q)) changed.push_back(i);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImportCounts> ImportOrganisation(State& state, const Organisation& org,
                                                absl::Time now, ChangeSet& changes) {
  const size_t entries = org.teams.size() + org.quotas.size();
  if (entries == 0) return absl::InvalidArgumentError("teams: no teams and no quotas to import");
  if (entries > kMaxImportEntries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quotas: ", entries, " teams and quotas; at most ", kMaxImportEntries, " in one import"));
  }
  std::vector<size_t> created;
  ARBITER_RETURN_IF_ERROR(CheckImportedTeams(state, org.teams, created));
  std::vector<size_t> changed;
  ARBITER_RETURN_IF_ERROR(CheckImportedQuotas(state, org, changed));
  // Checked: from here on nothing fails.
  for (size_t i : created) {
    ARBITER_RETURN_IF_ERROR(state.LoadTeam(org.teams[i]));
    changes.changes.emplace_back(org.teams[i]);
  }
  std::set<std::string> pools;
  for (size_t i : changed) {
    ARBITER_RETURN_IF_ERROR(state.LoadQuota(org.quotas[i]));
    changes.changes.emplace_back(org.quotas[i]);
    pools.insert(org.quotas[i].pool);
  }
  for (const std::string& pool : pools) AdmitQueued(state, pool, now, changes);
  return ImportCounts{static_cast<int64_t>(created.size()),
                      static_cast<int64_t>(org.teams.size() - created.size()),
                      static_cast<int64_t>(changed.size()),
                      static_cast<int64_t>(org.quotas.size() - changed.size())};
}

std::vector<int64_t> QueuePositions(const State& state, const std::vector<int64_t>& ids) {
  std::vector<int64_t> positions(ids.size(), 0);
  // Pool -> (order, index into `ids`) of the queued requests asked.
  std::map<std::string, std::vector<std::pair<QueueOrder, size_t>>> asked;
  std::map<std::string, PassShares> shares;
  for (size_t i = 0; i < ids.size(); ++i) {
    const CapacityRequest* r = state.FindLiveRequest(ids[i]);
    if (r == nullptr || r->state != RequestState::kQueued) continue;
    auto it = shares.try_emplace(r->spec.pool, state, r->spec.pool).first;
    asked[r->spec.pool].emplace_back(it->second.OrderOf(*r), i);
  }
  for (auto& [pool, targets] : asked) {
    std::sort(targets.begin(), targets.end());
    // ahead[j]: queued requests that come before targets[j] and after
    // targets[j-1], summed below.
    std::vector<int64_t> ahead(targets.size() + 1, 0);
    PassShares& pass = shares.at(pool);
    for (int64_t id : state.QueuedIn(pool)) {
      const QueueOrder order = pass.OrderOf(*state.FindLiveRequest(id));
      auto first_after = std::upper_bound(
          targets.begin(), targets.end(), order,
          [](const QueueOrder& o, const std::pair<QueueOrder, size_t>& t) { return o < t.first; });
      ++ahead[first_after - targets.begin()];
    }
    int64_t before = 0;
    for (size_t j = 0; j < targets.size(); ++j) {
      before += ahead[j];
      positions[targets[j].second] = before + 1;
    }
  }
  return positions;
}

}  // namespace arbiter::core
