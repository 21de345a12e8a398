// Pool admission: what a pool's rules let in and on what terms. Spot
// normalisation, bursts, class-to-pool rules (with their lending windows),
// serving headroom and watt budgets, for DecideNow and RequestCapacity in
// core/arbitration.cc (docs/pools.md, docs/power.md).
//
// Thread-compatible, like State.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

#include "core/arbitration.h"
#include "core/arbitration_internal.h"
#include "core/preemption.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

// Why `c`'s admission on `pool` at `at` is what it is, for a refusal's text.
std::string RuleText(const Pool& pool, WorkloadClass c, absl::Time at) {
  const ClassAdmission a = AdmissionAt(pool, c, at);
  std::string text = absl::StrCat("rule ", WorkloadClassName(c), "=", ClassAdmissionName(a));
  const PoolClassRule* rule = ClassRuleOf(pool, c);
  if (rule != nullptr && rule->window.has_value() && a != rule->admission) {
    // Outside the rule's window: say when it opens next.
    absl::StrAppend(&text, ", the default of ", LatencyClassName(pool.latency_class),
                    " pools outside the window '", FormatRecurringWindow(*rule->window), "' of ",
                    WorkloadClassName(c), "=", ClassAdmissionName(rule->admission));
    if (std::optional<Interval> next = NextOccurrence(*rule->window, at)) {
      absl::StrAppend(&text, ", which opens next at ",
                      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", next->start, absl::UTCTimeZone()));
    }
  } else if (!HasClassRule(pool, c)) {
    absl::StrAppend(&text, ", the default of ", LatencyClassName(pool.latency_class),
                    " pools; pool.class_rules may change it");
  }
  return text;
}

// Free milli-GPU of `model` on the schedulable nodes of `pool`.
int64_t FreeMilliOf(const State& state, const std::string& pool, const std::string& model) {
  int64_t free = 0;
  for (size_t i : state.PoolNodes(pool)) {
    const Node& node = state.nodes()[i];
    if (!node.schedulable()) continue;
    for (const Gpu& g : node.gpus) {
      if (g.model == model) free += g.free_milli();
    }
  }
  return free;
}

// Whether `spec` may take `pool`'s headroom at `now`: work of a class the
// pool admits, not spot.
bool MayTakeHeadroom(const Pool& pool, const CapacityRequestSpec& spec, absl::Time now) {
  return !spec.spot && AdmissionAt(pool, spec.workload_class, now) == ClassAdmission::kAdmit;
}

// Whole watts, rounded up, of `mw` milliwatts.
int64_t Watts(int64_t mw) { return (mw + 999) / 1000; }

// What `request` draws in the scope of `budget`.
int64_t DrawIn(const State& state, const CapacityRequest& request, const PowerBudget& budget) {
  int64_t mw = 0;
  for (const ScopeDraw& d : state.PowerDraws(request.spec.pool, request.placements)) {
    if (d.scope == budget.scope && d.name == budget.name) mw += d.milliwatts;
  }
  return mw;
}

// Tells preemptible work drawing in `budget`'s scope to vacate, spot first
// and then least lost work, until what stays is within the budget.
void ReclaimPower(State& state, const PowerBudget& budget, absl::Time now, ChangeSet& changes) {
  int64_t excess = state.power().DrawMilliwatts(budget.scope, budget.name) - budget.watts * 1000;
  if (excess <= 0) return;
  // (not spot, lost work, priority, id, draw)
  std::vector<std::tuple<bool, int64_t, int32_t, int64_t, int64_t>> candidates;
  for (const auto& [id, r] : state.live_requests()) {
    if (r.state != RequestState::kAdmitted || !r.spec.preemptible || r.spec.guaranteed) continue;
    const int64_t mw = DrawIn(state, r, budget);
    if (mw > 0) candidates.emplace_back(!r.spec.spot, LostWork(r, now), r.spec.priority, id, mw);
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [not_spot, lost, priority, id, mw] : candidates) {
    if (excess <= 0) break;
    CapacityRequest v = *state.FindLiveRequest(id);
    const int64_t grace = TellToVacate(*state.FindPool(v.spec.pool), v, kReasonPowerReclaim, now);
    v.reason = absl::StrCat("the power budget of ", PowerScopeName(budget.scope), " ", budget.name,
                            " is ", budget.watts, " W; vacate within ", grace, " s");
    state.PutRequest(v);
    changes.changes.emplace_back(RequestWrite{std::move(v), /*is_new=*/false});
    excess -= mw;
  }
}

// Whether `pool` has a request waiting for a watt budget.
bool WaitsForPower(const State& state, const std::string& pool) {
  for (int64_t id : state.QueuedIn(pool)) {
    if (state.FindLiveRequest(id)->reason_code == kReasonPower) return true;
  }
  return false;
}

}  // namespace

// Work on a SPOT pool is spot, and spot work is preemptible. INVALID_ARGUMENT
// (naming `guaranteed`) for guaranteed work on a SPOT pool.
absl::Status NormalizeSpot(const Pool& pool, CapacityRequestSpec& spec) {
  if (pool.latency_class == LatencyClass::kSpot) {
    if (spec.guaranteed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "guaranteed: pool ", pool.name, " is a SPOT pool; its work is spot, never guaranteed"));
    }
    spec.spot = true;
  }
  if (spec.spot) spec.preemptible = true;
  return absl::OkStatus();
}

// A burst is asked of a pool that allows it, for a class it admits.
// INVALID_ARGUMENT naming `burst_seconds` otherwise.
absl::Status CheckBurst(const Pool& pool, const CapacityRequestSpec& spec, absl::Time now) {
  if (spec.burst_seconds == 0) return absl::OkStatus();
  if (pool.max_burst_seconds == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "burst_seconds: pool ", pool.name, " allows no bursts (no headroom to burst into)"));
  }
  if (spec.burst_seconds > pool.max_burst_seconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("burst_seconds: pool ", pool.name, " allows bursts of at most ",
                     pool.max_burst_seconds, " s, got ", spec.burst_seconds));
  }
  const ClassAdmission admission = AdmissionAt(pool, spec.workload_class, now);
  if (admission != ClassAdmission::kAdmit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "burst_seconds: only classes pool ", pool.name, " admits may burst; ",
        WorkloadClassName(spec.workload_class), " is ", ClassAdmissionName(admission)));
  }
  return absl::OkStatus();
}

// Whether the pool's class-to-pool rules take `spec`'s class at `at` (now,
// or a reservation's start); sets the denial otherwise: POOL_DOES_NOT_LEND
// for a denied class, NOT_PREEMPTIBLE for a borrowing class asked for
// without `preemptible`.
bool PoolAdmitsClass(const State& state, CapacityRequest& request, absl::Time at) {
  const CapacityRequestSpec& spec = request.spec;
  const Pool& pool = *state.FindPool(spec.pool);
  const ClassAdmission admission = AdmissionAt(pool, spec.workload_class, at);
  if (admission == ClassAdmission::kAdmit) return true;
  if (admission == ClassAdmission::kDeny) {
    SetOutcome(
        request, RequestState::kDenied, kReasonPoolLending,
        absl::StrCat("pool ", spec.pool, " does not admit ", WorkloadClassName(spec.workload_class),
                     " work (", RuleText(pool, spec.workload_class, at), ")"));
    return false;
  }
  if (!spec.preemptible) {
    SetOutcome(request, RequestState::kDenied, kReasonNotPreemptible,
               absl::StrCat("pool ", spec.pool, " takes ", WorkloadClassName(spec.workload_class),
                            " work only as preemptible capacity (",
                            RuleText(pool, spec.workload_class, at), "); set preemptible"));
    return false;
  }
  return true;
}

// Milli-GPU of each GPU model that `placements` take.
std::map<std::string, int64_t> MilliByModel(const State& state,
                                            const std::vector<Placement>& placements) {
  std::map<std::string, int64_t> out;
  for (const Placement& p : placements) {
    const Node* node = state.FindNode(p.node_id);
    for (int32_t g : p.gpu_indices) out[node->gpus[g].model] += p.gpu_milli;
  }
  return out;
}

// Why `placements` of `spec`, applied to `state`, eat into `pool`'s
// headroom; "" when they leave it free (or `spec` may take it).
std::string HeadroomTaken(const State& state, const Pool& pool, const CapacityRequestSpec& spec,
                          const std::vector<Placement>& placements, absl::Time now) {
  if (pool.headroom.empty() || MayTakeHeadroom(pool, spec, now)) return "";
  for (const auto& [model, milli] : MilliByModel(state, placements)) {
    const int64_t headroom = HeadroomOf(pool, model);
    if (headroom == 0) continue;
    const int64_t free_after = FreeMilliOf(state, pool.name, model);
    if (free_after < headroom) {
      return absl::StrCat("pool ", pool.name, " keeps ", headroom, " milli-GPU of ", model,
                          " free for its serving classes (", free_after + milli,
                          " free now); this work may not take it");
    }
  }
  return "";
}

// Why `placements` of work in `pool` would exceed a watt budget, naming it
// and the shortfall; "" when they stay within every budget.
std::string PowerShortfall(const State& state, const std::string& pool,
                           const std::vector<Placement>& placements) {
  if (state.power().empty()) return "";
  const std::vector<ScopeDraw> draws = state.PowerDraws(pool, placements);
  int64_t short_mw = 0;
  const PowerBudget* budget = state.power().Exceeded(draws, &short_mw);
  if (budget == nullptr) return "";
  int64_t adding_mw = 0;
  for (const ScopeDraw& d : draws) {
    if (d.scope == budget->scope && d.name == budget->name) adding_mw += d.milliwatts;
  }
  return absl::StrCat("power budget of ", PowerScopeName(budget->scope), " ", budget->name, ": ",
                      Watts(state.power().DrawMilliwatts(budget->scope, budget->name)),
                      " W drawn + ", Watts(adding_mw), " W would exceed its ", budget->watts,
                      " W by ", Watts(short_mw), " W");
}

// Milli-GPU of `model` held by bursts in `pool`.
int64_t BurstingMilli(const State& state, const std::string& pool, const std::string& model) {
  int64_t milli = 0;
  for (int64_t id : state.HoldingIn(pool)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (r.burst_until == absl::InfinitePast()) continue;
    const std::map<std::string, int64_t> taken = MilliByModel(state, r.placements);
    if (auto it = taken.find(model); it != taken.end()) milli += it->second;
  }
  return milli;
}

absl::Status SetPowerBudget(State& state, const PowerBudget& budget, absl::Time now,
                            ChangeSet& changes) {
  ARBITER_RETURN_IF_ERROR(ValidatePowerBudget(budget));
  if (budget.scope == PowerScope::kPool && state.FindPool(budget.name) == nullptr) {
    return NotFound("power_budget.name", "pool", budget.name);
  }
  if (budget.scope == PowerScope::kSite && !state.HasCluster(budget.name)) {
    return NotFound("power_budget.name", "site (cluster)", budget.name);
  }
  state.LoadPowerBudget(budget);
  changes.changes.emplace_back(budget);
  if (budget.reclaim) ReclaimPower(state, budget, now, changes);
  // A raised budget may let waiting work in.
  std::vector<std::string> waiting;
  for (const auto& [name, pool] : state.pools()) {
    if (WaitsForPower(state, name)) waiting.push_back(name);
  }
  for (const std::string& name : waiting) AdmitQueued(state, name, now, changes);
  return absl::OkStatus();
}

}  // namespace arbiter::core
