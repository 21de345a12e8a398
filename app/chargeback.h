// Chargeback: SLOs, reported latency windows and the incidents they become,
// chargeback statements and closed periods. Attribution and statements are
// computed on the read workers from the store (core/externality.h,
// core/chargeback.h); what must be durable (an incident with its charges, a
// closed period) is then an engine command, answered after COMMIT. See
// proto/arbiter/v1/chargeback.proto for the contracts.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "app/authz.h"
#include "app/context.h"
#include "core/chargeback.h"
#include "core/externality.h"

namespace arbiter::app {

// Every team's statement for [from, to), with the hourly series, the
// period's incidents and the conservation totals.
struct ChargebackReport {
  absl::Time from;
  absl::Time to;
  std::vector<core::Statement> statements;
  std::vector<core::HourPoint> hours;  // Reserved and used milli-GPU seconds per hour.
  std::vector<core::Incident> incidents;
  int64_t incidents_attributed_micros = 0;
  // Held by all allocations in the period, summed by the store on its own
  // (a conservation check of the statements).
  int64_t cluster_reserved_milli_seconds = 0;
};

// A period's statements: as closed (the stored encoding, which stands for
// ever), or computed now when the period is not closed.
struct ChargebackAnswer {
  std::optional<core::PeriodClose> closed;
  ChargebackReport computed;  // Unset when `closed` is.
  // For a named team: its own allocated and used GPU time per hour, which
  // replaces the organisation's (closed or not).
  std::optional<std::vector<core::HourPoint>> team_hours;
};

// What one reported window came to.
struct LatencyOutcome {
  bool duplicate = false;  // The window (or its incident) was stored by an earlier report.
  bool breached = false;   // Its p99 missed the SLO's target.
  std::optional<core::Incident> incident;
};

// The one encoding of a closed period's statements, which the edge defines
// (the API's JSON form); the stored text and its SHA-256 stand for ever.
using StatementsEncoder = std::function<std::string(const ChargebackReport& report)>;

class Chargeback {
 public:
  explicit Chargeback(const Context& ctx) : ctx_(ctx) {}

  // A team admin of the SLO's team may set it. INVALID_ARGUMENT per
  // core::ValidateSlo.
  void SetSlo(const Caller& caller, core::Slo slo, Reply<Done> reply) const;
  void ListSlos(const Caller& caller, std::string team, Reply<std::vector<core::Slo>> reply) const;
  // A window reported for `team`'s service. The first report of a window
  // stands; one that breaches its SLO records an incident, attributed to the
  // teams that caused it, at most once. NOT_FOUND "window.service" without
  // an SLO; INVALID_ARGUMENT "window.end" for a window not yet ended.
  void ReportLatency(const Caller& caller, const std::string& team,
                     absl::StatusOr<core::LatencyWindow> window, Reply<LatencyOutcome> reply) const;
  // Incidents recorded in the period that `team` ("" for all) suffered or caused.
  void ListIncidents(const Caller& caller, absl::StatusOr<Span> period, std::string team,
                     Reply<std::vector<core::Incident>> reply) const;
  // The period's statements. Team members and admins read their own team's
  // (`team`, or a team under theirs); the whole organisation's ("" ) and
  // other teams' need an org-wide reader: finance, auditor, platform admin.
  // PERMISSION_DENIED otherwise.
  void GetChargeback(const Caller& caller, absl::StatusOr<Span> period, const std::string& team,
                     Reply<ChargebackAnswer> reply) const;
  // Computes the period's statements, stores them encoded by `encode` with
  // their hash, and replies with the report and the close once committed.
  // FAILED_PRECONDITION (core::ClosePeriod) when it is closed already.
  void ClosePeriod(const Caller& caller, absl::StatusOr<Span> period, StatementsEncoder encode,
                   Reply<std::pair<ChargebackReport, core::PeriodClose>> reply) const;

 private:
  const Context ctx_;
};

}  // namespace arbiter::app
