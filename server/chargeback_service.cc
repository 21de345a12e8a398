// ChargebackService: SLOs, latency windows and incidents, chargeback
// statements and closed periods. Attribution and statements are computed on
// the worker pool from the store (core/externality.h, core/chargeback.h);
// what must be durable (an incident, its charges, a closed period) is then a
// command on the arbiter, answered after COMMIT.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "ledger/chain.h"

#include "core/arbitration.h"
#include "core/chargeback.h"
#include "core/externality.h"
#include "core/status_macros.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

// The longest period a statement covers.
constexpr absl::Duration kMaxPeriod = absl::Hours(24 * 400);
// Later than any time the API accepts (TimeFromProto: up to 2200).
const absl::Time kEndOfTime = absl::FromUnixSeconds(7'258'118'400);
// How far past the server's clock a reported window may end.
constexpr absl::Duration kWindowSkew = absl::Minutes(1);

core::Slo SloFromProto(const v1::Slo& s) {
  core::Slo slo;
  slo.team = s.team();
  slo.service = s.service();
  slo.pool = s.pool();
  slo.p99_target_us = s.p99_target_us();
  slo.window = absl::Seconds(s.window_seconds());
  slo.penalty_micros_per_minute = s.penalty_micros_per_minute();
  return slo;
}

void ToProto(const core::Slo& slo, v1::Slo* out) {
  out->set_team(slo.team);
  out->set_service(slo.service);
  out->set_pool(slo.pool);
  out->set_p99_target_us(slo.p99_target_us);
  out->set_window_seconds(absl::ToInt64Seconds(slo.window));
  out->set_penalty_micros_per_minute(slo.penalty_micros_per_minute);
}

absl::StatusOr<core::LatencyWindow> WindowFromProto(const v1::LatencyWindow& w) {
  core::LatencyWindow out;
  if (w.team().empty()) return absl::InvalidArgumentError("window.team: required");
  if (w.service().empty()) return absl::InvalidArgumentError("window.service: required");
  out.team = w.team();
  out.service = w.service();
  ARBITER_ASSIGN_OR_RETURN(out.start, TimeFromProto(w.has_start(), w.start(), "window.start"));
  ARBITER_ASSIGN_OR_RETURN(out.end, TimeFromProto(w.has_end(), w.end(), "window.end"));
  out.p50_us = w.p50_us();
  out.p99_us = w.p99_us();
  out.requests_milli_per_second = w.requests_milli_per_second();
  return out;
}

void ToProto(const core::LatencyWindow& w, v1::LatencyWindow* out) {
  out->set_team(w.team);
  out->set_service(w.service);
  *out->mutable_start() = TimestampOf(w.start);
  *out->mutable_end() = TimestampOf(w.end);
  out->set_p50_us(w.p50_us);
  out->set_p99_us(w.p99_us);
  out->set_requests_milli_per_second(w.requests_milli_per_second);
}

void ToProto(const core::Incident& i, v1::Incident* out) {
  out->set_id(i.id);
  ToProto(i.window, out->mutable_window());
  out->set_team(i.slo.team);
  out->set_service(i.slo.service);
  out->set_pool(i.slo.pool);
  out->set_p99_target_us(i.slo.p99_target_us);
  out->set_cost_micros(i.attribution.cost_micros);
  out->set_cost_basis(i.attribution.cost_basis);
  out->set_attributed_micros(i.attribution.attributed_micros());
  out->set_method(core::kAttributionMethod);
  *out->mutable_recorded_at() = TimestampOf(i.recorded_at);
  for (size_t k = 0; k < i.attribution.causes.size(); ++k) {
    const core::Interference& f = i.attribution.causes[k];
    v1::ExternalityCharge* c = out->add_charges();
    c->set_team(f.team);
    c->set_micros(i.attribution.charges_micros[k]);
    c->set_borrowed_milli_seconds(f.borrowed_milli_seconds);
    c->set_co_tenancy_milli_seconds(f.co_tenancy_milli_seconds);
    c->set_admission_delay_milli_seconds(f.admission_delay_milli_seconds);
    for (int64_t id : f.request_ids) c->add_request_ids(id);
  }
}

void ToProto(const core::Statement& s, v1::Statement* out) {
  out->set_team(s.team);
  for (const core::StatementLine& l : s.lines) {
    v1::StatementLine* p = out->add_lines();
    p->set_pool(l.pool);
    p->set_gpu_model(l.gpu_model);
    p->set_workload_class(static_cast<v1::WorkloadClass>(l.workload_class));
    p->set_reserved_milli_seconds(l.reserved_milli_seconds);
    p->set_sampled_milli_seconds(l.sampled_milli_seconds);
    p->set_used_milli_seconds(l.used_milli_seconds);
    p->set_reserved_cost_micros(l.reserved_cost_micros);
    p->set_idle_cost_micros(l.idle_cost_micros);
    p->set_energy_mwh(l.energy_mwh);
  }
  out->set_reserved_milli_seconds(s.reserved_milli_seconds);
  out->set_sampled_milli_seconds(s.sampled_milli_seconds);
  out->set_used_milli_seconds(s.used_milli_seconds);
  out->set_reserved_cost_micros(s.reserved_cost_micros);
  out->set_idle_cost_micros(s.idle_cost_micros);
  out->set_energy_mwh(s.energy_mwh);
  out->set_borrowed_milli_seconds(s.borrowed_milli_seconds);
  out->set_externality_charged_micros(s.externality_charged_micros);
  out->set_externality_credited_micros(s.externality_credited_micros);
  out->set_incidents_caused(s.incidents_caused);
  out->set_incidents_suffered(s.incidents_suffered);
  out->set_net_cost_micros(s.net_cost_micros);
  if (s.budget_micros >= 0) out->set_budget_micros(s.budget_micros);
  out->set_remainder_micros(s.remainder_micros);
}

// A period on whole hours, at most kMaxPeriod long.
absl::Status PeriodFromProto(bool has, const v1::Period& p, absl::Time* from, absl::Time* to) {
  if (!has) return absl::InvalidArgumentError("period: required");
  ARBITER_ASSIGN_OR_RETURN(*from, TimeFromProto(p.has_from(), p.from(), "period.from"));
  ARBITER_ASSIGN_OR_RETURN(*to, TimeFromProto(p.has_to(), p.to(), "period.to"));
  for (auto [t, field] : {std::pair{*from, "period.from"}, std::pair{*to, "period.to"}}) {
    if ((t - absl::UnixEpoch()) % absl::Hours(1) != absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": must be on a whole hour (UTC)"));
    }
  }
  if (*to <= *from) return absl::InvalidArgumentError("period.to: must be after period.from");
  if (*to - *from > kMaxPeriod) {
    return absl::InvalidArgumentError("period.to: a period is at most 400 days");
  }
  return absl::OkStatus();
}

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
  ARBITER_ASSIGN_OR_RETURN(in.held, store.ListHeldMembers(window.start, window.end));
  ARBITER_ASSIGN_OR_RETURN(in.waiting,
                           store.ListWaitingRequests(slo.team, slo.pool, window.start, window.end));
  ARBITER_ASSIGN_OR_RETURN(auto quotas, store.ListQuotas(""));
  in.nominal_milli = NominalIn(quotas, slo.pool);
  ARBITER_ASSIGN_OR_RETURN(auto pools, store.ListPools());
  ARBITER_ASSIGN_OR_RETURN(auto prices, store.ListPrices());
  const core::PriceBook book(prices);
  for (const core::Pool& p : pools) {
    if (p.name != slo.pool) continue;
    in.serving_pool = p.latency_class == core::LatencyClass::kServing;
    for (const core::HeldMember& m : in.held) {
      if (m.pool != slo.pool) continue;
      if (auto price = book.At(m.gpu_model, p.latency_class, window.start)) {
        in.micros_per_gpu_hour[m.gpu_model] = *price;
      }
    }
  }
  return in;
}

// The statements of every team for [from, to), with the hourly series, the
// period's incidents and the conservation totals. Allocations still held
// count until `now` (an open period's future holds nothing yet).
absl::Status ComputeChargeback(store::Store& store, absl::Time from, absl::Time to, absl::Time now,
                               v1::GetChargebackResponse* resp) {
  core::ChargebackInputs in;
  in.from = from;
  in.to = to;
  const absl::Time held_to = std::max(from, std::min(to, now));
  ARBITER_ASSIGN_OR_RETURN(in.held, store.ListHeldMembers(from, held_to));
  for (core::HeldMember& m : in.held) m.until = std::min(m.until, held_to);
  ARBITER_ASSIGN_OR_RETURN(auto usage, store.ListMemberUsage(from, to));
  for (const core::MemberUsage& u : usage) in.usage[{u.request_id, u.member}] = u;
  ARBITER_ASSIGN_OR_RETURN(auto pools, store.ListPools());
  for (const core::Pool& p : pools) in.pool_classes[p.name] = p.latency_class;
  ARBITER_ASSIGN_OR_RETURN(in.prices, store.ListPrices());
  ARBITER_ASSIGN_OR_RETURN(auto quotas, store.ListQuotas(""));
  for (const store::QuotaUsage& q : quotas) {
    in.nominal_milli[{q.quota.pool, q.quota.team}] += q.quota.nominal_milli;
  }
  ARBITER_ASSIGN_OR_RETURN(in.charges, store.ListCharges(from, to));
  ARBITER_ASSIGN_OR_RETURN(in.budgets, store.ListBudgets());
  ARBITER_ASSIGN_OR_RETURN(auto teams, store.ListTeams());
  for (const core::Team& t : teams) in.teams.push_back(t.name);

  *resp->mutable_period()->mutable_from() = TimestampOf(from);
  *resp->mutable_period()->mutable_to() = TimestampOf(to);
  for (const core::Statement& s : core::BuildStatements(in)) ToProto(s, resp->add_statements());
  std::vector<core::HourPoint> hours = core::HourlyReserved(in.held, "", from, to);
  ARBITER_ASSIGN_OR_RETURN(auto used, store.ListUsedByHour(from, to, ""));
  std::map<absl::Time, int64_t> used_at;
  for (const core::HourPoint& p : used) used_at[p.hour] = p.used_milli_seconds;
  for (const core::HourPoint& p : hours) {
    v1::HourPoint* h = resp->add_hours();
    *h->mutable_hour() = TimestampOf(p.hour);
    h->set_reserved_milli_seconds(p.reserved_milli_seconds);
    h->set_used_milli_seconds(used_at[p.hour]);
  }
  ARBITER_ASSIGN_OR_RETURN(auto incidents, store.ListIncidents(from, to, "", 0));
  int64_t attributed = 0;
  for (const core::Incident& i : incidents) {
    ToProto(i, resp->add_incidents());
    attributed += i.attribution.attributed_micros();
  }
  resp->set_incidents_attributed_micros(attributed);
  ARBITER_ASSIGN_OR_RETURN(int64_t cluster, store.ClusterReservedMilliSeconds(from, held_to));
  resp->set_cluster_reserved_milli_seconds(cluster);
  return absl::OkStatus();
}

// Keeps only `team`'s statement and the incidents it suffered or caused.
void NarrowToTeam(const std::string& team, v1::GetChargebackResponse* resp) {
  if (team.empty()) return;
  resp->set_team(team);
  auto* statements = resp->mutable_statements();
  for (int i = statements->size() - 1; i >= 0; --i) {
    if (statements->Get(i).team() != team) statements->DeleteSubrange(i, 1);
  }
  auto* incidents = resp->mutable_incidents();
  for (int i = incidents->size() - 1; i >= 0; --i) {
    const v1::Incident& inc = incidents->Get(i);
    bool involved = inc.team() == team;
    for (const v1::ExternalityCharge& c : inc.charges()) involved |= c.team() == team;
    if (!involved) incidents->DeleteSubrange(i, 1);
  }
}

std::string StatementsJson(const v1::GetChargebackResponse& resp) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(resp, &json, options);
  return json;
}

void MarkClosed(const core::PeriodClose& p, v1::GetChargebackResponse* resp) {
  resp->set_closed(true);
  *resp->mutable_closed_at() = TimestampOf(p.closed_at);
  resp->set_sha256(p.hash);
}

}  // namespace

grpc::ServerUnaryReactor* ChargebackService::SetSlo(grpc::CallbackServerContext* ctx,
                                                    const v1::SetSloRequest* req,
                                                    v1::SetSloResponse* resp) {
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "ChargebackService.SetSlo", {req->slo().team(), ""});
      !access.ok()) {
    return FinishWith(ctx, access, "SetSlo");
  }
  const core::Slo slo = SloFromProto(req->slo());
  if (absl::Status valid = core::ValidateSlo(slo); !valid.ok()) {
    return FinishWith(ctx, valid, "SetSlo");
  }
  ToProto(slo, resp->mutable_slo());
  return RunCommand(ctx, *ctx_.arbiter, "SetSlo",
                    [slo](core::State& state, absl::Time, core::ChangeSet& changes) {
                      return core::SetSlo(state, slo, changes);
                    });
}

grpc::ServerUnaryReactor* ChargebackService::ListSlos(grpc::CallbackServerContext* ctx,
                                                      const v1::ListSlosRequest* req,
                                                      v1::ListSlosResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "ChargebackService.ListSlos", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListSlos");
  }
  return RunRead(ctx, *ctx_.reads, "ListSlos", [this, team = req->team(), resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto slos, ctx_.store->ListSlos(team));
    for (const core::Slo& s : slos) ToProto(s, resp->add_slos());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ChargebackService::ReportLatency(grpc::CallbackServerContext* ctx,
                                                           const v1::ReportLatencyRequest* req,
                                                           v1::ReportLatencyResponse* resp) {
  if (absl::Status access =
          CheckAccess(*ctx, ctx_, "ChargebackService.ReportLatency", {req->window().team(), ""});
      !access.ok()) {
    return FinishWith(ctx, access, "ReportLatency");
  }
  absl::StatusOr<core::LatencyWindow> window = WindowFromProto(req->window());
  if (!window.ok()) return FinishWith(ctx, window.status(), "ReportLatency");
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Finish finish = [reactor](const absl::Status& s) {
    reactor->Finish(ToGrpcStatus(s, "ReportLatency"));
  };
  const bool queued = ctx_.reads->Submit([this, w = *window, resp, finish, actor = ActorOf(*ctx)] {
    if (std::optional<absl::Status> done = ReportOnPool(w, actor, resp, finish)) finish(*done);
  });
  if (!queued) finish(absl::ResourceExhaustedError("too many reads in flight; retry"));
  return reactor;
}

std::optional<absl::Status> ChargebackService::ReportOnPool(const core::LatencyWindow& w,
                                                            const std::string& actor,
                                                            v1::ReportLatencyResponse* resp,
                                                            Finish finish) {
  absl::StatusOr<std::vector<core::Slo>> slos = ctx_.store->ListSlos(w.team);
  if (!slos.ok()) return slos.status();
  auto slo = std::find_if(slos->begin(), slos->end(),
                          [&](const core::Slo& s) { return s.service == w.service; });
  if (slo == slos->end()) {
    return absl::NotFoundError(
        absl::StrCat("window.service: team '", w.team, "' declared no SLO for '", w.service, "'"));
  }
  if (absl::Status valid = core::ValidateLatencyWindow(w, *slo); !valid.ok()) return valid;
  const absl::Time now = ctx_.clock->TimeNow();
  if (w.end > now + kWindowSkew) {
    return absl::InvalidArgumentError("window.end: the window has not ended yet");
  }
  // The first report of a window stands. A repeat (or a retry after a
  // failure between storing the window and recording its incident) decides
  // on the stored window; the arbiter records its incident at most once.
  absl::StatusOr<store::Store::StoredWindow> stored = ctx_.store->InsertLatencyWindow(w, now);
  if (!stored.ok()) return stored.status();
  const core::LatencyWindow& window = stored->window;
  resp->set_duplicate(!stored->first);
  if (window.p99_us <= slo->p99_target_us) return absl::OkStatus();
  resp->set_breached(true);
  absl::StatusOr<core::AttributionInputs> in = GatherAttribution(*ctx_.store, *slo, window);
  if (!in.ok()) return in.status();
  auto incident = std::make_shared<core::Incident>();
  incident->slo = *slo;
  incident->window = window;
  incident->recorded_at = now;
  incident->attribution = core::AttributeIncident(*in);
  // Set on the arbiter thread: whether this call recorded the incident.
  auto fresh = std::make_shared<bool>(false);
  ctx_.arbiter->Submit(
      [incident, fresh](core::State& state, absl::Time, core::ChangeSet& changes) {
        const core::LatencyWindow& w = incident->window;
        *fresh = state.FindIncident(w.team, w.service, w.start) == 0;
        ARBITER_ASSIGN_OR_RETURN(incident->id, core::RecordIncident(state, *incident, changes));
        return absl::OkStatus();
      },
      [this, incident, fresh, resp, finish](const absl::Status& s) {
        if (!s.ok() || *fresh) {
          if (s.ok()) ToProto(*incident, resp->mutable_incident());
          return finish(s);
        }
        // Recorded by an earlier report: answer the stored incident.
        resp->set_duplicate(true);
        const bool read = ctx_.reads->Submit([this, id = incident->id, resp, finish] {
          absl::StatusOr<std::vector<core::Incident>> stored =
              ctx_.store->ListIncidents(absl::UnixEpoch(), kEndOfTime, "", id);
          if (stored.ok() && !stored->empty()) ToProto(stored->front(), resp->mutable_incident());
          finish(stored.status());
        });
        if (!read) finish(absl::ResourceExhaustedError("too many reads in flight; retry"));
      },
      actor);
  return std::nullopt;
}

grpc::ServerUnaryReactor* ChargebackService::ListIncidents(grpc::CallbackServerContext* ctx,
                                                           const v1::ListIncidentsRequest* req,
                                                           v1::ListIncidentsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "ChargebackService.ListIncidents", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListIncidents");
  }
  absl::Time from, to;
  if (absl::Status valid = PeriodFromProto(req->has_period(), req->period(), &from, &to);
      !valid.ok()) {
    return FinishWith(ctx, valid, "ListIncidents");
  }
  return RunRead(ctx, *ctx_.reads, "ListIncidents",
                 [this, from, to, team = req->team(), resp]() -> absl::Status {
                   ARBITER_ASSIGN_OR_RETURN(auto incidents,
                                            ctx_.store->ListIncidents(from, to, team, 0));
                   for (const core::Incident& i : incidents) ToProto(i, resp->add_incidents());
                   return absl::OkStatus();
                 });
}

grpc::ServerUnaryReactor* ChargebackService::GetChargeback(grpc::CallbackServerContext* ctx,
                                                           const v1::GetChargebackRequest* req,
                                                           v1::GetChargebackResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "ChargebackService.GetChargeback", {});
      !access.ok()) {
    return FinishWith(ctx, access, "GetChargeback");
  }
  absl::Time from, to;
  if (absl::Status valid = PeriodFromProto(req->has_period(), req->period(), &from, &to);
      !valid.ok()) {
    return FinishWith(ctx, valid, "GetChargeback");
  }
  return RunRead(
      ctx, *ctx_.reads, "GetChargeback",
      [this, from, to, team = req->team(), resp]() -> absl::Status {
        ARBITER_ASSIGN_OR_RETURN(std::optional<core::PeriodClose> closed,
                                 ctx_.store->GetClosedPeriod(from, to));
        if (closed.has_value()) {
          if (!google::protobuf::util::JsonStringToMessage(closed->statements_json, resp).ok()) {
            return absl::DataLossError("the closed period's stored statements do not parse");
          }
          MarkClosed(*closed, resp);
        } else {
          ARBITER_RETURN_IF_ERROR(
              ComputeChargeback(*ctx_.store, from, to, ctx_.clock->TimeNow(), resp));
        }
        NarrowToTeam(team, resp);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* ChargebackService::ClosePeriod(grpc::CallbackServerContext* ctx,
                                                         const v1::ClosePeriodRequest* req,
                                                         v1::ClosePeriodResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "ChargebackService.ClosePeriod", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ClosePeriod");
  }
  absl::Time from, to;
  if (absl::Status valid = PeriodFromProto(req->has_period(), req->period(), &from, &to);
      !valid.ok()) {
    return FinishWith(ctx, valid, "ClosePeriod");
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Finish finish = [reactor](const absl::Status& s) {
    reactor->Finish(ToGrpcStatus(s, "ClosePeriod"));
  };
  const bool queued = ctx_.reads->Submit([this, from, to, resp, finish, actor = ActorOf(*ctx)] {
    v1::GetChargebackResponse* out = resp->mutable_chargeback();
    absl::Status computed = ComputeChargeback(*ctx_.store, from, to, ctx_.clock->TimeNow(), out);
    if (!computed.ok()) return finish(computed);
    auto close = std::make_shared<core::PeriodClose>();
    close->from = from;
    close->to = to;
    close->statements_json = StatementsJson(*out);
    close->hash = ledger::Sha256Hex(close->statements_json);
    close->teams = out->statements_size();
    for (const v1::Statement& s : out->statements()) close->net_cost_micros += s.net_cost_micros();
    ctx_.arbiter->Submit(
        [close](core::State& state, absl::Time now, core::ChangeSet& changes) {
          close->closed_at = now;
          return core::ClosePeriod(state, *close, now, changes);
        },
        [close, out, finish](const absl::Status& s) {
          if (s.ok()) MarkClosed(*close, out);
          finish(s);
        },
        actor);
  });
  if (!queued) finish(absl::ResourceExhaustedError("too many reads in flight; retry"));
  return reactor;
}

}  // namespace arbiter::server
