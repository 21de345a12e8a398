// ChargebackService: SLOs, latency windows and incidents, chargeback
// statements and closed periods (app/chargeback.h). This file converts
// between protobuf and the application's types, and defines the stored
// encoding of a closed period (the response's JSON).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

#include "core/status_macros.h"
#include "server/caller.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

// The longest period a statement covers.
constexpr absl::Duration kMaxPeriod = absl::Hours(24 * 400);

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
    p->set_energy_measured_mwh(l.energy_measured_mwh);
    p->set_energy_estimated_mwh(l.energy_estimated_mwh);
    p->set_spot(l.spot);
    p->set_burst(l.burst);
  }
  out->set_reserved_milli_seconds(s.reserved_milli_seconds);
  out->set_sampled_milli_seconds(s.sampled_milli_seconds);
  out->set_used_milli_seconds(s.used_milli_seconds);
  out->set_reserved_cost_micros(s.reserved_cost_micros);
  out->set_idle_cost_micros(s.idle_cost_micros);
  out->set_energy_mwh(s.energy_mwh);
  out->set_energy_measured_mwh(s.energy_measured_mwh);
  out->set_energy_estimated_mwh(s.energy_estimated_mwh);
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
absl::StatusOr<app::Span> PeriodFromProto(bool has, const v1::Period& p) {
  if (!has) return absl::InvalidArgumentError("period: required");
  app::Span span;
  ARBITER_ASSIGN_OR_RETURN(span.from, TimeFromProto(p.has_from(), p.from(), "period.from"));
  ARBITER_ASSIGN_OR_RETURN(span.to, TimeFromProto(p.has_to(), p.to(), "period.to"));
  for (auto [t, field] : {std::pair{span.from, "period.from"}, std::pair{span.to, "period.to"}}) {
    if ((t - absl::UnixEpoch()) % absl::Hours(1) != absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": must be on a whole hour (UTC)"));
    }
  }
  if (span.to <= span.from)
    return absl::InvalidArgumentError("period.to: must be after period.from");
  if (span.to - span.from > kMaxPeriod) {
    return absl::InvalidArgumentError("period.to: a period is at most 400 days");
  }
  return span;
}

// The response form of a computed report (also the encoding a closed
// period stores: StatementsJson).
// Appends `hours` to the response's hourly series.
void AddHours(const std::vector<core::HourPoint>& hours, v1::GetChargebackResponse* resp) {
  for (const core::HourPoint& p : hours) {
    v1::HourPoint* h = resp->add_hours();
    *h->mutable_hour() = TimestampOf(p.hour);
    h->set_reserved_milli_seconds(p.reserved_milli_seconds);
    h->set_used_milli_seconds(p.used_milli_seconds);
  }
}

void ToProto(const app::ChargebackReport& report, v1::GetChargebackResponse* resp) {
  *resp->mutable_period()->mutable_from() = TimestampOf(report.from);
  *resp->mutable_period()->mutable_to() = TimestampOf(report.to);
  for (const core::Statement& s : report.statements) ToProto(s, resp->add_statements());
  AddHours(report.hours, resp);
  for (const core::Incident& i : report.incidents) ToProto(i, resp->add_incidents());
  resp->set_incidents_attributed_micros(report.incidents_attributed_micros);
  resp->set_cluster_reserved_milli_seconds(report.cluster_reserved_milli_seconds);
}

// Keeps only `team`'s statement, its own hours (`hours`) and the incidents
// it suffered or caused; the organisation's totals go.
void NarrowToTeam(const std::string& team, const std::optional<std::vector<core::HourPoint>>& hours,
                  v1::GetChargebackResponse* resp) {
  if (team.empty()) return;
  resp->set_team(team);
  resp->clear_hours();
  if (hours.has_value()) AddHours(*hours, resp);
  resp->clear_cluster_reserved_milli_seconds();
  resp->clear_incidents_attributed_micros();
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
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const core::Slo slo = SloFromProto(req->slo());
  ctx_.app->chargeback().SetSlo(CallerOf(*ctx, ctx_.insecure), slo,
                                Answer<app::Done>(reactor, "SetSlo", [slo, resp](const app::Done&) {
                                  ToProto(slo, resp->mutable_slo());
                                }));
  return reactor;
}

grpc::ServerUnaryReactor* ChargebackService::ListSlos(grpc::CallbackServerContext* ctx,
                                                      const v1::ListSlosRequest* req,
                                                      v1::ListSlosResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->chargeback().ListSlos(
      CallerOf(*ctx, ctx_.insecure), req->team(),
      Answer<std::vector<core::Slo>>(reactor, "ListSlos",
                                     [resp](const std::vector<core::Slo>& slos) {
                                       for (const core::Slo& s : slos) ToProto(s, resp->add_slos());
                                     }));
  return reactor;
}

grpc::ServerUnaryReactor* ChargebackService::ReportLatency(grpc::CallbackServerContext* ctx,
                                                           const v1::ReportLatencyRequest* req,
                                                           v1::ReportLatencyResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->chargeback().ReportLatency(
      CallerOf(*ctx, ctx_.insecure), req->window().team(), WindowFromProto(req->window()),
      Answer<app::LatencyOutcome>(reactor, "ReportLatency",
                                  [resp](const app::LatencyOutcome& outcome) {
                                    resp->set_duplicate(outcome.duplicate);
                                    resp->set_breached(outcome.breached);
                                    if (outcome.incident.has_value()) {
                                      ToProto(*outcome.incident, resp->mutable_incident());
                                    }
                                  }));
  return reactor;
}

grpc::ServerUnaryReactor* ChargebackService::ListIncidents(grpc::CallbackServerContext* ctx,
                                                           const v1::ListIncidentsRequest* req,
                                                           v1::ListIncidentsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->chargeback().ListIncidents(
      CallerOf(*ctx, ctx_.insecure), PeriodFromProto(req->has_period(), req->period()), req->team(),
      Answer<std::vector<core::Incident>>(reactor, "ListIncidents",
                                          [resp](const std::vector<core::Incident>& incidents) {
                                            for (const core::Incident& i : incidents)
                                              ToProto(i, resp->add_incidents());
                                          }));
  return reactor;
}

grpc::ServerUnaryReactor* ChargebackService::GetChargeback(grpc::CallbackServerContext* ctx,
                                                           const v1::GetChargebackRequest* req,
                                                           v1::GetChargebackResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->chargeback().GetChargeback(
      CallerOf(*ctx, ctx_.insecure), PeriodFromProto(req->has_period(), req->period()), req->team(),
      [reactor, team = req->team(), resp](absl::StatusOr<app::ChargebackAnswer> answer) {
        absl::Status status = answer.status();
        if (answer.ok() && answer->closed.has_value()) {
          // A closed period answers what was stored when it was closed.
          if (!google::protobuf::util::JsonStringToMessage(answer->closed->statements_json, resp)
                   .ok()) {
            status = absl::DataLossError("the closed period's stored statements do not parse");
          } else {
            MarkClosed(*answer->closed, resp);
          }
        } else if (answer.ok()) {
          ToProto(answer->computed, resp);
        }
        if (status.ok()) NarrowToTeam(team, answer->team_hours, resp);
        reactor->Finish(ToGrpcStatus(status, "GetChargeback"));
      });
  return reactor;
}

grpc::ServerUnaryReactor* ChargebackService::ClosePeriod(grpc::CallbackServerContext* ctx,
                                                         const v1::ClosePeriodRequest* req,
                                                         v1::ClosePeriodResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // The stored form is the response's JSON: what GetChargeback answers for
  // the period from then on.
  app::StatementsEncoder encode = [](const app::ChargebackReport& report) {
    v1::GetChargebackResponse statements;
    ToProto(report, &statements);
    return StatementsJson(statements);
  };
  ctx_.app->chargeback().ClosePeriod(
      CallerOf(*ctx, ctx_.insecure), PeriodFromProto(req->has_period(), req->period()),
      std::move(encode),
      Answer<std::pair<app::ChargebackReport, core::PeriodClose>>(
          reactor, "ClosePeriod",
          [resp](const std::pair<app::ChargebackReport, core::PeriodClose>& closed) {
            v1::GetChargebackResponse* out = resp->mutable_chargeback();
            ToProto(closed.first, out);
            MarkClosed(closed.second, out);
          }));
  return reactor;
}

}  // namespace arbiter::server
