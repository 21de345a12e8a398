// Proactive reclaim (docs/pools.md, "Proactive reclaim"): a SERVING pool
// with Pool::proactive_reclaim learns its own classes' demand per quarter
// hour of the week (core/serving_forecast.h) and, once a minute, reclaims
// lent capacity when the demand it forecasts within its lead (reclaim grace
// + cold start) would not fit in what is free, returning, or already its
// own. Borrowed work is not admitted into capacity that forecast needs.
//
// Thread-compatible, like State.
#include <algorithm>
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

std::string Utc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

// Whether `spec` is the pool's own serving demand at `now`: a class the
// pool admits (not borrows), and not spot.
bool IsOwn(const Pool& pool, const CapacityRequestSpec& spec, absl::Time now) {
  return !spec.spot && AdmissionAt(pool, spec.workload_class, now) == ClassAdmission::kAdmit;
}

// Whether admitted `r` holds capacity the pool lent and may take back.
bool IsLent(const Pool& pool, const CapacityRequest& r, absl::Time now) {
  return r.state == RequestState::kAdmitted && r.spec.preemptible && !r.spec.guaranteed &&
         !IsOwn(pool, r.spec, now);
}

absl::Duration LeadOf(const Pool& pool) {
  return absl::Seconds(pool.reclaim_grace_seconds + pool.cold_start_seconds);
}

// What the forecast needs beyond what is free, returning or the pool's own
// already: the milli-GPU to take back now. <= 0 when nothing is.
int64_t Shortfall(const PoolFigures& f, int64_t peak) {
  return peak - f.own_milli - f.free_milli - f.leaving_milli;
}

// Tells lent work in `pool` to vacate, spot first and then least lost work,
// until `need` milli-GPU are on their way back.
void ReclaimAhead(State& state, const Pool& pool, const ServingForecast::Peak& peak,
                  const PoolFigures& figures, int64_t need, absl::Time now, ChangeSet& changes) {
  // (not spot, lost work, priority, id)
  std::vector<std::tuple<bool, int64_t, int32_t, int64_t>> candidates;
  for (int64_t id : state.HoldingIn(pool.name)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (IsLent(pool, r, now)) {
      candidates.emplace_back(!r.spec.spot, LostWork(r, now), r.spec.priority, id);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [not_spot, lost, priority, id] : candidates) {
    if (need <= 0) break;
    CapacityRequest v = *state.FindLiveRequest(id);
    const int64_t grace = TellToVacate(pool, v, kReasonProactiveReclaim, now);
    v.reason = absl::StrCat(
        "pool ", pool.name, " forecasts ", peak.milli, " milli-GPU of serving demand from ",
        Utc(peak.at), " (learnt from past weeks; its own classes hold ", figures.own_milli, ", ",
        figures.free_milli, " are free and ", figures.leaving_milli,
        " returning); lent capacity is reclaimed ahead of it by its reclaim grace of ",
        pool.reclaim_grace_seconds, " s + cold start of ", pool.cold_start_seconds,
        " s; vacate within ", grace, " s");
    need -= v.spec.total_gpu_milli();
    state.PutRequest(v);
    changes.changes.emplace_back(RequestWrite{std::move(v), /*is_new=*/false});
  }
}

// Whether `pool` has a request waiting for its forecast to fall.
bool WaitsForForecast(const State& state, const std::string& pool) {
  for (int64_t id : state.QueuedIn(pool)) {
    if (state.FindLiveRequest(id)->reason_code == kReasonForecast) return true;
  }
  return false;
}

}  // namespace

PoolFigures FiguresOf(const State& state, const Pool& pool, absl::Time now) {
  PoolFigures f;
  for (size_t i : state.PoolNodes(pool.name)) {
    const Node& node = state.nodes()[i];
    if (!node.schedulable()) continue;
    for (const Gpu& g : node.gpus) {
      f.capacity_milli += kMilliPerGpu;
      f.free_milli += g.free_milli();
    }
  }
  for (int64_t id : state.HoldingIn(pool.name)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    const int64_t milli = r.spec.total_gpu_milli();
    if (r.state == RequestState::kPreempting) {
      f.leaving_milli += milli;
    } else if (IsOwn(pool, r.spec, now)) {
      f.own_milli += milli;
    } else if (IsLent(pool, r, now)) {
      f.lent_milli += milli;
    }
  }
  for (int64_t id : state.QueuedIn(pool.name)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (IsOwn(pool, r.spec, now)) f.asked_milli += r.spec.total_gpu_milli();
  }
  return f;
}

void ObserveServingDemand(State& state, absl::Time now, ChangeSet& changes) {
  bool any = false;
  std::vector<std::string> to_admit;
  for (const auto& [name, pool] : state.pools()) {
    if (!pool.proactive_reclaim) continue;
    any = true;
    const PoolFigures figures = FiguresOf(state, pool, now);
    ServingForecast& forecast = state.ForecastFor(name);
    const DemandSlot before = forecast.slot(QuarterHourOfWeek(now));
    const DemandSlot& after = forecast.Observe(now, figures.own_milli + figures.asked_milli);
    if (after.week != before.week || after.peak_milli != before.peak_milli) {
      changes.demand.push_back(DemandSlotWrite{name, after});
    }
    const ServingForecast::Peak peak = forecast.PeakWithin(now, now + LeadOf(pool));
    const int64_t need = Shortfall(figures, peak.milli);
    if (need > 0) ReclaimAhead(state, pool, peak, figures, need, now, changes);
    if (WaitsForForecast(state, name)) to_admit.push_back(name);
  }
  for (const std::string& name : to_admit) AdmitQueued(state, name, now, changes);
  state.set_demand_sample_at(any ? now + kDemandSampleEvery : absl::InfiniteFuture());
}

std::string ForecastTaken(const State& state, const Pool& pool, const CapacityRequestSpec& spec,
                          absl::Time now) {
  if (!pool.proactive_reclaim || IsOwn(pool, spec, now)) return "";
  const ServingForecast* forecast = state.FindForecast(pool.name);
  if (forecast == nullptr) return "";
  const ServingForecast::Peak peak = forecast->PeakWithin(now, now + LeadOf(pool));
  if (peak.milli == 0) return "";
  const PoolFigures figures = FiguresOf(state, pool, now);
  if (Shortfall(figures, peak.milli) <= 0) return "";
  return absl::StrCat("pool ", pool.name, " keeps capacity for the ", peak.milli,
                      " milli-GPU of serving demand it forecasts from ", Utc(peak.at),
                      " (its own classes hold ", figures.own_milli, "); this work would leave ",
                      figures.free_milli + figures.leaving_milli,
                      " free or returning, and may not take what the forecast needs");
}

absl::StatusOr<ForecastView> ForecastOf(const State& state, const std::string& pool_name,
                                        absl::Time now, int32_t hours) {
  if (hours < 1 || hours > 168) {
    return absl::InvalidArgumentError(absl::StrCat("hours: must be 1..168 (a week), got ", hours));
  }
  ARBITER_RETURN_IF_ERROR(ValidateName("pool", pool_name));
  const Pool* pool = state.FindPool(pool_name);
  if (pool == nullptr) return NotFound("pool", "pool", pool_name);
  if (!pool->proactive_reclaim) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pool: pool ", pool_name, " does not forecast its demand (pool.proactive_reclaim)"));
  }
  ForecastView view;
  view.pool = pool_name;
  view.lead_seconds = absl::ToInt64Seconds(LeadOf(*pool));
  view.figures = FiguresOf(state, *pool, now);
  static const ServingForecast kEmpty;
  const ServingForecast* forecast = state.FindForecast(pool_name);
  if (forecast == nullptr) forecast = &kEmpty;
  view.peak = forecast->PeakWithin(now, now + LeadOf(*pool));
  view.reclaim_milli = std::max<int64_t>(
      0, std::min(Shortfall(view.figures, view.peak.milli), view.figures.lent_milli));
  const absl::Time first = QuarterHourStart(now);
  for (int i = 0; i < hours * 4; ++i) {
    const absl::Time start = first + absl::Minutes(15 * i);
    const DemandSlot& s = forecast->slot(QuarterHourOfWeek(start));
    view.slots.push_back(ForecastView::Slot{start, forecast->At(start, now), s.week >= 0});
  }
  for (int64_t id : state.HoldingIn(pool_name)) {
    const CapacityRequest& r = *state.FindLiveRequest(id);
    if (r.state == RequestState::kPreempting && r.reason_code == kReasonProactiveReclaim) {
      view.notices.push_back(r);
    }
  }
  return view;
}

}  // namespace arbiter::core
