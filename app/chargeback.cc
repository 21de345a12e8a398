#include "app/chargeback.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/arbitration.h"
#include "core/status_macros.h"
#include "ledger/chain.h"

namespace arbiter::app {
namespace {

// Later than any time the API accepts (TimeFromProto: up to 2200).
const absl::Time kEndOfTime = absl::FromUnixSeconds(7'258'118'400);
// How far past the application's clock a reported window may end.
constexpr absl::Duration kWindowSkew = absl::Minutes(1);

// Nominal quota per team in `pool`, over every GPU model.
std::map<std::string, int64_t> NominalIn(const std::vector<store::QuotaUsage>& quotas,
                                         const std::string& pool) {
  std::map<std::string, int64_t> out;
  for (const store::QuotaUsage& q : quotas) {
    if (q.quota.pool == pool) out[q.quota.team] += q.quota.nominal_milli;
  }
  return out;
}

// Everything the attribution of `window` under `slo` reads, from the store.
absl::StatusOr<core::AttributionInputs> GatherAttribution(store::Store& store, const core::Slo& slo,
                                                          const core::LatencyWindow& window) {
  core::AttributionInputs in;
  in.slo = slo;
  in.window = window;
  // Attribution weighs only what was held in the SLO's pool.
  ARBITER_ASSIGN_OR_RETURN(in.held,
                           store.ListHeldMembersInPool(slo.pool, window.start, window.end));
  ARBITER_ASSIGN_OR_RETURN(in.waiting,
                           store.ListWaitingRequests(slo.team, slo.pool, window.start, window.end));
  ARBITER_ASSIGN_OR_RETURN(auto quotas, store.ListQuotas(""));
  in.nominal_milli = NominalIn(quotas, slo.pool);
  ARBITER_ASSIGN_OR_RETURN(auto pools, store.ListPools());
  ARBITER_ASSIGN_OR_RETURN(auto prices, store.ListPrices());
  const core::PriceBook book(prices);
  for (const core::Pool& p : pools) {
    if (p.name != slo.pool) continue;
    in.lent_classes = core::LentClasses(p);
    for (const core::HeldMember& m : in.held) {
      if (m.pool != slo.pool) continue;
      if (auto price = book.At(m.gpu_model, m.spot ? core::LatencyClass::kSpot : p.latency_class,
                               window.start)) {
        in.micros_per_gpu_hour[m.gpu_model] = *price;
      }
    }
  }
  return in;
}

// The members held in [from, to), each counted until `now` at the latest
// (an open period's future holds nothing yet).
absl::StatusOr<std::vector<core::HeldMember>> HeldUntil(store::Store& store, absl::Time from,
                                                        absl::Time to, absl::Time now) {
  const absl::Time held_to = std::max(from, std::min(to, now));
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::HeldMember> held,
                           store.ListHeldMembers(from, held_to));
  for (core::HeldMember& m : held) m.until = std::min(m.until, held_to);
  return held;
}

// `team`'s ("" for all) allocated GPU time per hour of [from, to), from
// `held`, with the used time that telemetry measured.
absl::StatusOr<std::vector<core::HourPoint>> HourlySeries(store::Store& store,
                                                          const std::vector<core::HeldMember>& held,
                                                          const std::string& team, absl::Time from,
                                                          absl::Time to) {
  std::vector<core::HourPoint> hours = core::HourlyReserved(held, team, from, to);
  ARBITER_ASSIGN_OR_RETURN(auto used, store.ListUsedByHour(from, to, team));
  std::map<absl::Time, int64_t> used_at;
  for (const core::HourPoint& p : used) used_at[p.hour] = p.used_milli_seconds;
  for (core::HourPoint& p : hours) p.used_milli_seconds = used_at[p.hour];
  return hours;
}

// `team`'s allocated and used GPU time per hour of [from, to), held
// allocations counted until `now`.
absl::StatusOr<std::vector<core::HourPoint>> TeamHours(store::Store& store, absl::Time from,
                                                       absl::Time to, absl::Time now,
                                                       const std::string& team) {
  ARBITER_ASSIGN_OR_RETURN(std::vector<core::HeldMember> held, HeldUntil(store, from, to, now));
  return HourlySeries(store, held, team, from, to);
}

// The statements of every team for [from, to), with the hourly series, the
// period's incidents and the conservation totals. Allocations still held
// count until `now` (an open period's future holds nothing yet).
absl::StatusOr<ChargebackReport> ComputeChargeback(store::Store& store, absl::Time from,
                                                   absl::Time to, absl::Time now) {
  core::ChargebackInputs in;
  in.from = from;
  in.to = to;
  const absl::Time held_to = std::max(from, std::min(to, now));
  ARBITER_ASSIGN_OR_RETURN(in.held, HeldUntil(store, from, to, now));
  ARBITER_ASSIGN_OR_RETURN(auto usage, store.ListMemberUsage(from, to));
  for (const core::MemberUsage& u : usage) in.usage[{u.request_id, u.member}] = u;
  ARBITER_ASSIGN_OR_RETURN(auto pools, store.ListPools());
  for (const core::Pool& p : pools) {
    in.pool_classes[p.name] = p.latency_class;
    in.lent_classes[p.name] = core::LentClasses(p);
  }
  ARBITER_ASSIGN_OR_RETURN(in.prices, store.ListPrices());
  ARBITER_ASSIGN_OR_RETURN(auto models, store.ListGpuModels());
  for (const core::GpuModel& m : models) in.tdp_watts[m.name] = m.tdp_watts;
  ARBITER_ASSIGN_OR_RETURN(auto quotas, store.ListQuotas(""));
  for (const store::QuotaUsage& q : quotas) {
    in.nominal_milli[{q.quota.pool, q.quota.team}] += q.quota.nominal_milli;
  }
  ARBITER_ASSIGN_OR_RETURN(in.charges, store.ListCharges(from, to));
  ARBITER_ASSIGN_OR_RETURN(in.budgets, store.ListBudgets());
  ARBITER_ASSIGN_OR_RETURN(auto teams, store.ListTeams());
  for (const core::Team& t : teams) in.teams.push_back(t.name);

  ChargebackReport report;
  report.from = from;
  report.to = to;
  report.statements = core::BuildStatements(in);
  ARBITER_ASSIGN_OR_RETURN(report.hours, HourlySeries(store, in.held, "", from, to));
  ARBITER_ASSIGN_OR_RETURN(report.incidents, store.ListIncidents(from, to, "", 0));
  for (const core::Incident& i : report.incidents) {
    report.incidents_attributed_micros += i.attribution.attributed_micros();
  }
  ARBITER_ASSIGN_OR_RETURN(report.cluster_reserved_milli_seconds,
                           store.ClusterReservedMilliSeconds(from, held_to));
  return report;
}

// ReportLatency's work on a read worker: replies, or hands the incident to
// the engine (which replies).
void ReportOnWorker(const Context& ctx, const core::LatencyWindow& w, const std::string& actor,
                    Reply<LatencyOutcome> reply) {
  if (absl::Status names = core::ValidateLatencyWindowNames(w); !names.ok()) return reply(names);
  absl::StatusOr<std::vector<core::Slo>> slos = ctx.store->ListSlos(w.team);
  if (!slos.ok()) return reply(slos.status());
  auto slo = std::find_if(slos->begin(), slos->end(),
                          [&](const core::Slo& s) { return s.service == w.service; });
  if (slo == slos->end()) {
    return reply(absl::NotFoundError(
        absl::StrCat("window.service: team '", w.team, "' declared no SLO for '", w.service, "'")));
  }
  if (absl::Status valid = core::ValidateLatencyWindow(w, *slo); !valid.ok()) return reply(valid);
  const absl::Time now = ctx.clock->TimeNow();
  if (w.end > now + kWindowSkew) {
    return reply(absl::InvalidArgumentError("window.end: the window has not ended yet"));
  }
  // The first report of a window stands. A repeat (or a retry after a
  // failure between storing the window and recording its incident) decides
  // on the stored window; the engine records its incident at most once.
  absl::StatusOr<store::Store::StoredWindow> stored = ctx.store->InsertLatencyWindow(w, now);
  if (!stored.ok()) return reply(stored.status());
  const core::LatencyWindow& window = stored->window;
  LatencyOutcome outcome;
  outcome.duplicate = !stored->first;
  if (window.p99_us <= slo->p99_target_us) return reply(outcome);
  outcome.breached = true;
  absl::StatusOr<core::AttributionInputs> in = GatherAttribution(*ctx.store, *slo, window);
  if (!in.ok()) return reply(in.status());
  auto incident = std::make_shared<core::Incident>();
  incident->slo = *slo;
  incident->window = window;
  incident->recorded_at = now;
  incident->attribution = core::AttributeIncident(*in);
  // Set on the engine's thread: whether this call recorded the incident.
  auto fresh = std::make_shared<bool>(false);
  ctx.arbiter->Submit(
      [incident, fresh](core::State& state, absl::Time, core::ChangeSet& changes) {
        const core::LatencyWindow& w = incident->window;
        *fresh = state.FindIncident(w.team, w.service, w.start) == 0;
        ARBITER_ASSIGN_OR_RETURN(incident->id, core::RecordIncident(state, *incident, changes));
        return absl::OkStatus();
      },
      [ctx, incident, fresh, outcome, reply](const absl::Status& s) mutable {
        if (!s.ok()) return reply(s);
        if (*fresh) {
          outcome.incident = *incident;
          return reply(outcome);
        }
        // Recorded by an earlier report: answer the stored incident.
        outcome.duplicate = true;
        RunRead<LatencyOutcome>(
            ctx,
            [store = ctx.store, id = incident->id, outcome]() -> absl::StatusOr<LatencyOutcome> {
              absl::StatusOr<std::vector<core::Incident>> stored =
                  store->ListIncidents(absl::UnixEpoch(), kEndOfTime, "", id);
              if (!stored.ok()) return stored.status();
              LatencyOutcome out = outcome;
              if (!stored->empty()) out.incident = stored->front();
              return out;
            },
            reply);
      },
      actor);
}

}  // namespace

void Chargeback::SetSlo(const Caller& caller, core::Slo slo, Reply<Done> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "ChargebackService.SetSlo", {slo.team, ""});
      !access.ok()) {
    return reply(access);
  }
  if (absl::Status valid = core::ValidateSlo(slo); !valid.ok()) return reply(valid);
  RunCommand<Done>(
      ctx_, caller.actor(),
      [slo = std::move(slo)](core::State& state, absl::Time,
                             core::ChangeSet& changes) -> absl::StatusOr<Done> {
        if (absl::Status st = core::SetSlo(state, slo, changes); !st.ok()) return st;
        return Done{};
      },
      std::move(reply));
}

void Chargeback::ListSlos(const Caller& caller, std::string team,
                          Reply<std::vector<core::Slo>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "ChargebackService.ListSlos", {});
      !access.ok()) {
    return reply(access);
  }
  RunRead<std::vector<core::Slo>>(
      ctx_, [store = ctx_.store, team = std::move(team)] { return store->ListSlos(team); },
      std::move(reply));
}

void Chargeback::ReportLatency(const Caller& caller, const std::string& team,
                               absl::StatusOr<core::LatencyWindow> window,
                               Reply<LatencyOutcome> reply) const {
  if (absl::Status access =
          ctx_.access->Check(caller, "ChargebackService.ReportLatency", {team, ""});
      !access.ok()) {
    return reply(access);
  }
  if (!window.ok()) return reply(window.status());
  const bool queued =
      ctx_.reads->Submit([ctx = ctx_, w = *std::move(window), actor = caller.actor(), reply] {
        ReportOnWorker(ctx, w, actor, reply);
      });
  if (!queued) reply(absl::ResourceExhaustedError("too many reads in flight; retry"));
}

void Chargeback::ListIncidents(const Caller& caller, absl::StatusOr<Span> period, std::string team,
                               Reply<std::vector<core::Incident>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "ChargebackService.ListIncidents", {});
      !access.ok()) {
    return reply(access);
  }
  if (!period.ok()) return reply(period.status());
  RunRead<std::vector<core::Incident>>(
      ctx_,
      [store = ctx_.store, span = *period, team = std::move(team)] {
        return store->ListIncidents(span.from, span.to, team, 0);
      },
      std::move(reply));
}

void Chargeback::GetChargeback(const Caller& caller, absl::StatusOr<Span> period,
                               const std::string& team, Reply<ChargebackAnswer> reply) const {
  if (absl::Status access =
          ctx_.access->Check(caller, "ChargebackService.GetChargeback", Resource{team, ""});
      !access.ok()) {
    return reply(access);
  }
  if (!period.ok()) return reply(period.status());
  if (team == kAnyTeam) return reply(absl::InvalidArgumentError("team: \"*\" names no team"));
  RunRead<ChargebackAnswer>(
      ctx_,
      [store = ctx_.store, clock = ctx_.clock, span = *period,
       team]() -> absl::StatusOr<ChargebackAnswer> {
        ChargebackAnswer answer;
        const absl::Time now = clock->TimeNow();
        ARBITER_ASSIGN_OR_RETURN(answer.closed, store->GetClosedPeriod(span.from, span.to));
        if (!answer.closed.has_value()) {
          ARBITER_ASSIGN_OR_RETURN(answer.computed,
                                   ComputeChargeback(*store, span.from, span.to, now));
        }
        if (!team.empty()) {
          ARBITER_ASSIGN_OR_RETURN(answer.team_hours,
                                   TeamHours(*store, span.from, span.to, now, team));
        }
        return answer;
      },
      std::move(reply));
}

void Chargeback::ClosePeriod(const Caller& caller, absl::StatusOr<Span> period,
                             StatementsEncoder encode,
                             Reply<std::pair<ChargebackReport, core::PeriodClose>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "ChargebackService.ClosePeriod", {});
      !access.ok()) {
    return reply(access);
  }
  if (!period.ok()) return reply(period.status());
  const bool queued = ctx_.reads->Submit(
      [ctx = ctx_, span = *period, encode = std::move(encode), actor = caller.actor(), reply] {
        absl::StatusOr<ChargebackReport> report =
            ComputeChargeback(*ctx.store, span.from, span.to, ctx.clock->TimeNow());
        if (!report.ok()) return reply(report.status());
        auto closing = std::make_shared<std::pair<ChargebackReport, core::PeriodClose>>();
        closing->first = *std::move(report);
        core::PeriodClose& close = closing->second;
        close.from = span.from;
        close.to = span.to;
        close.statements_json = encode(closing->first);
        close.hash = ledger::Sha256Hex(close.statements_json);
        close.teams = static_cast<int32_t>(closing->first.statements.size());
        for (const core::Statement& s : closing->first.statements) {
          close.net_cost_micros += s.net_cost_micros;
        }
        ctx.arbiter->Submit(
            [closing](core::State& state, absl::Time now, core::ChangeSet& changes) {
              closing->second.closed_at = now;
              return core::ClosePeriod(state, closing->second, now, changes);
            },
            [closing, reply](const absl::Status& s) {
              if (!s.ok()) return reply(s);
              reply(std::move(*closing));
            },
            actor);
      });
  if (!queued) reply(absl::ResourceExhaustedError("too many reads in flight; retry"));
}

}  // namespace arbiter::app
