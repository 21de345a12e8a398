// ChargebackRecords: declared SLOs, the incidents recorded for breached
// windows (one per window), and the chargeback periods closed, with the
// change types that record them. A part of core::State.
//
// Thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/time/time.h"

#include "core/externality.h"

namespace arbiter::core {

// A breached window recorded as an incident, with its attribution; its
// charges follow it as ExternalityCharge changes.
struct IncidentWrite {
  Incident incident;
};

// A chargeback period closed: its statements, frozen, and their hash.
struct PeriodClose {
  absl::Time from;
  absl::Time to;
  absl::Time closed_at;
  std::string statements_json;  // The GetChargeback response, as JSON.
  std::string hash;             // Hex SHA-256 of statements_json.
  int32_t teams = 0;
  int64_t net_cost_micros = 0;  // Over all teams.
};

class ChargebackRecords {
 public:
  // SLOs by (team, service), replaced when declared again.
  void PutSlo(const Slo& slo) { slos_[{slo.team, slo.service}] = slo; }
  const Slo* FindSlo(const std::string& team, const std::string& service) const {
    auto it = slos_.find({team, service});
    return it == slos_.end() ? nullptr : &it->second;
  }
  const std::map<std::pair<std::string, std::string>, Slo>& slos() const { return slos_; }

  // The incident `id` recorded for a window; ids continue after the largest.
  void LoadIncident(const std::string& team, const std::string& service, absl::Time start,
                    int64_t id) {
    incidents_[{team, service, start}] = id;
    next_incident_id_ = std::max(next_incident_id_, id + 1);
  }
  // The incident recorded for that window; 0 when none is.
  int64_t FindIncident(const std::string& team, const std::string& service,
                       absl::Time start) const {
    auto it = incidents_.find({team, service, start});
    return it == incidents_.end() ? 0 : it->second;
  }
  int64_t TakeIncidentId() { return next_incident_id_++; }

  // Closed periods, as [from, to); they never overlap each other.
  void LoadClosedPeriod(absl::Time from, absl::Time to) { closed_periods_[from] = to; }
  // The closed period overlapping [from, to), if any, as (from, to).
  std::optional<std::pair<absl::Time, absl::Time>> FindClosedOverlap(absl::Time from,
                                                                     absl::Time to) const {
    // The last period starting before `to` is the only one that can overlap.
    auto it = closed_periods_.lower_bound(to);
    if (it == closed_periods_.begin()) return std::nullopt;
    --it;
    if (it->second > from) return std::make_pair(it->first, it->second);
    return std::nullopt;
  }

 private:
  std::map<std::pair<std::string, std::string>, Slo> slos_;
  std::map<std::tuple<std::string, std::string, absl::Time>, int64_t> incidents_;
  int64_t next_incident_id_ = 1;
  std::map<absl::Time, absl::Time> closed_periods_;
};

}  // namespace arbiter::core
