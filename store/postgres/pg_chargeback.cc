// PgStore: idle policies, SLOs, latency windows, incidents with their charges, and closed
// chargeback periods.
#include <string>
#include <vector>

#include <pqxx/pqxx>

#include "core/status_macros.h"
#include "store/postgres/pg_rows.h"
#include "store/postgres/pg_store.h"
#include "store/postgres/statements.h"

namespace arbiter::store {
namespace {

core::ExternalityCharge ChargeFromRow(const pqxx::row& row) {
  core::ExternalityCharge c;
  c.incident_id = row[0].as<int64_t>();
  c.team = row[1].as<std::string>();
  c.micros = row[2].as<int64_t>();
  c.interference.team = c.team;
  c.interference.borrowed_milli_seconds = row[3].as<int64_t>();
  c.interference.co_tenancy_milli_seconds = row[4].as<int64_t>();
  c.interference.admission_delay_milli_seconds = row[5].as<int64_t>();
  c.interference.request_ids = rows::BigintArray(row[6]);
  c.booked_at = absl::FromUnixMicros(row[7].as<int64_t>());
  return c;
}

core::Incident IncidentFromRow(const pqxx::row& row) {
  core::Incident i;
  i.id = row[0].as<int64_t>();
  i.slo.team = i.window.team = row[1].as<std::string>();
  i.slo.service = i.window.service = row[2].as<std::string>();
  i.slo.pool = row[3].as<std::string>();
  i.window.start = absl::FromUnixMicros(row[4].as<int64_t>());
  i.window.end = absl::FromUnixMicros(row[5].as<int64_t>());
  i.window.p50_us = row[6].as<int64_t>();
  i.window.p99_us = row[7].as<int64_t>();
  i.slo.p99_target_us = row[8].as<int64_t>();
  i.attribution.cost_micros = row[9].as<int64_t>();
  i.attribution.cost_basis = row[10].as<std::string>();
  i.recorded_at = absl::FromUnixMicros(row[11].as<int64_t>());
  i.slo.window = absl::Seconds(row[12].as<int64_t>());
  i.slo.penalty_micros_per_minute = row[13].as<int64_t>();
  return i;
}

}  // namespace

absl::StatusOr<std::vector<core::HourPoint>> PgStore::ListUsedByHour(absl::Time from, absl::Time to,
                                                                     const std::string& team) {
  return WithConnection(
      "list used by hour",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::HourPoint>> {
        pqxx::read_transaction tx(c);
        std::vector<core::HourPoint> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectUsedByHour, rows::ToMicros(from),
                                                     rows::ToMicros(to), team)) {
          core::HourPoint p;
          p.hour = absl::FromUnixMicros(row[0].as<int64_t>());
          p.used_milli_seconds = row[1].as<int64_t>();
          out.push_back(p);
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::IdlePolicy>> PgStore::ListIdlePolicies() {
  return WithConnection("list idle policies",
                        [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::IdlePolicy>> {
                          pqxx::read_transaction tx(c);
                          std::vector<core::IdlePolicy> out;
                          for (const pqxx::row& row : tx.exec_prepared(sql::kSelectIdlePolicies)) {
                            core::IdlePolicy p;
                            p.workload_class =
                                core::WorkloadClassFromName(row[0].as<std::string>());
                            p.threshold_milli = row[1].as<int32_t>();
                            p.window = absl::Seconds(row[2].as<int64_t>());
                            p.action = core::IdleActionFromName(row[3].as<std::string>());
                            p.notice = absl::Seconds(row[4].as<int64_t>());
                            out.push_back(p);
                          }
                          return out;
                        });
}

absl::StatusOr<std::vector<core::Slo>> PgStore::ListSlos(const std::string& team) {
  return WithConnection("list SLOs",
                        [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Slo>> {
                          pqxx::read_transaction tx(c);
                          std::vector<core::Slo> out;
                          for (const pqxx::row& row : tx.exec_prepared(sql::kSelectSlos, team)) {
                            core::Slo s;
                            s.team = row[0].as<std::string>();
                            s.service = row[1].as<std::string>();
                            s.pool = row[2].as<std::string>();
                            s.p99_target_us = row[3].as<int64_t>();
                            s.window = absl::Seconds(row[4].as<int64_t>());
                            s.penalty_micros_per_minute = row[5].as<int64_t>();
                            out.push_back(std::move(s));
                          }
                          return out;
                        });
}

absl::StatusOr<Store::StoredWindow> PgStore::InsertLatencyWindow(const core::LatencyWindow& w,
                                                                 absl::Time reported_at) {
  return WithConnection(
      "insert latency window", [&](pqxx::connection& c) -> absl::StatusOr<StoredWindow> {
        pqxx::work tx(c);
        const pqxx::result r =
            tx.exec_prepared(sql::kInsertLatencyWindow, w.team, w.service, rows::ToMicros(w.start),
                             rows::ToMicros(w.end), w.p50_us, w.p99_us, w.requests_milli_per_second,
                             rows::ToMicros(reported_at));
        StoredWindow out{w, r.affected_rows() == 1};
        if (!out.first) {
          const pqxx::result stored = tx.exec_prepared(sql::kSelectLatencyWindow, w.team, w.service,
                                                       rows::ToMicros(w.start));
          if (stored.empty()) return absl::AbortedError("latency window vanished; retry");
          out.window.end = absl::FromUnixMicros(stored[0][0].as<int64_t>());
          out.window.p50_us = stored[0][1].as<int64_t>();
          out.window.p99_us = stored[0][2].as<int64_t>();
          out.window.requests_milli_per_second = stored[0][3].as<int64_t>();
        }
        tx.commit();
        return out;
      });
}

absl::StatusOr<std::vector<core::WaitingRequest>> PgStore::ListWaitingRequests(
    const std::string& team, const std::string& pool, absl::Time from, absl::Time to) {
  return WithConnection(
      "list waiting requests",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::WaitingRequest>> {
        pqxx::read_transaction tx(c);
        std::vector<core::WaitingRequest> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectWaitingRequests, team, pool,
                                                     rows::ToMicros(from), rows::ToMicros(to))) {
          core::WaitingRequest w;
          w.request_id = row[0].as<int64_t>();
          w.gpu_milli = row[1].as<int64_t>();
          w.priority = row[2].as<int32_t>();
          w.from = absl::FromUnixMicros(row[3].as<int64_t>());
          const int64_t until = row[4].as<int64_t>();
          w.until = until == INT64_MAX ? absl::InfiniteFuture() : absl::FromUnixMicros(until);
          out.push_back(w);
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::Incident>> PgStore::ListIncidents(absl::Time from, absl::Time to,
                                                                   const std::string& team,
                                                                   int64_t id) {
  return WithConnection(
      "list incidents", [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::Incident>> {
        pqxx::read_transaction tx(c);
        std::vector<core::Incident> out;
        std::vector<int64_t> ids;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectIncidents, rows::ToMicros(from),
                                                     rows::ToMicros(to), team, id)) {
          out.push_back(IncidentFromRow(row));
          ids.push_back(out.back().id);
        }
        if (ids.empty()) return out;
        size_t at = 0;
        for (const pqxx::row& row :
             tx.exec_prepared(sql::kSelectIncidentCharges, rows::BigintArrayLiteral(ids))) {
          core::ExternalityCharge charge = ChargeFromRow(row);
          while (at < out.size() && out[at].id != charge.incident_id) ++at;
          if (at == out.size()) break;
          if (charge.micros < 0) continue;  // The victim's credit: the sum of the charges.
          out[at].attribution.causes.push_back(charge.interference);
          out[at].attribution.charges_micros.push_back(charge.micros);
        }
        return out;
      });
}

absl::StatusOr<std::vector<core::ExternalityCharge>> PgStore::ListCharges(absl::Time from,
                                                                          absl::Time to) {
  return WithConnection(
      "list charges",
      [&](pqxx::connection& c) -> absl::StatusOr<std::vector<core::ExternalityCharge>> {
        pqxx::read_transaction tx(c);
        std::vector<core::ExternalityCharge> out;
        for (const pqxx::row& row : tx.exec_prepared(sql::kSelectChargesBooked,
                                                     rows::ToMicros(from), rows::ToMicros(to))) {
          out.push_back(ChargeFromRow(row));
        }
        return out;
      });
}

absl::StatusOr<std::optional<core::PeriodClose>> PgStore::GetClosedPeriod(absl::Time from,
                                                                          absl::Time to) {
  return WithConnection(
      "get closed period",
      [&](pqxx::connection& c) -> absl::StatusOr<std::optional<core::PeriodClose>> {
        pqxx::read_transaction tx(c);
        const pqxx::result r = tx.exec_prepared(sql::kSelectChargebackPeriod, rows::ToMicros(from),
                                                rows::ToMicros(to));
        if (r.empty()) return std::optional<core::PeriodClose>();
        core::PeriodClose p;
        p.from = from;
        p.to = to;
        p.closed_at = absl::FromUnixMicros(r[0][0].as<int64_t>());
        p.statements_json = r[0][1].as<std::string>();
        p.hash = r[0][2].as<std::string>();
        p.teams = r[0][3].as<int32_t>();
        p.net_cost_micros = r[0][4].as<int64_t>();
        return std::optional<core::PeriodClose>(std::move(p));
      });
}

absl::StatusOr<int64_t> PgStore::ClusterReservedMilliSeconds(absl::Time from, absl::Time to) {
  return WithConnection("cluster reserved", [&](pqxx::connection& c) -> absl::StatusOr<int64_t> {
    pqxx::read_transaction tx(c);
    return tx
        .exec_prepared(sql::kSelectClusterReserved, rows::ToMicros(from), rows::ToMicros(to))[0][0]
        .as<int64_t>();
  });
}

}  // namespace arbiter::store
