// ChargebackStore: SLOs, reported latency windows, incidents with their
// externality charges, closed chargeback periods, and the reads chargeback
// statements are computed from.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/externality.h"
#include "core/state.h"

namespace arbiter::store {

class ChargebackStore {
 public:
  virtual ~ChargebackStore() = default;

  // SLOs of `team` ("" for all), by team and service.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Slo>> ListSlos(
      const std::string& team) = 0;
  // Stores a reported window (a measurement, written at once) unless that
  // window of that service is stored already: the first report wins.
  // Returns the stored window, and whether this call stored it.
  struct StoredWindow {
    core::LatencyWindow window;
    bool first = false;
  };
  [[nodiscard]] virtual absl::StatusOr<StoredWindow> InsertLatencyWindow(
      const core::LatencyWindow& window, absl::Time reported_at) = 0;
  // `team`'s requests in `pool` that waited for admission at some time in
  // [from, to), by id.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::WaitingRequest>> ListWaitingRequests(
      const std::string& team, const std::string& pool, absl::Time from, absl::Time to) = 0;
  // Incidents recorded in [from, to) that `team` suffered or caused ("" for
  // all; `id` > 0 for that one only), with their charges (credits left out
  // of the causes), by id.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::Incident>> ListIncidents(
      absl::Time from, absl::Time to, const std::string& team, int64_t id) = 0;
  // Charges and credits booked in [from, to), by incident and team.
  [[nodiscard]] virtual absl::StatusOr<std::vector<core::ExternalityCharge>> ListCharges(
      absl::Time from, absl::Time to) = 0;
  // The closed period [from, to) exactly; nullopt when it is not closed.
  [[nodiscard]] virtual absl::StatusOr<std::optional<core::PeriodClose>> GetClosedPeriod(
      absl::Time from, absl::Time to) = 0;
  // Milli-GPU seconds held in [from, to) by all allocations, summed by the
  // store (independently of the statements, as a conservation check).
  [[nodiscard]] virtual absl::StatusOr<int64_t> ClusterReservedMilliSeconds(absl::Time from,
                                                                            absl::Time to) = 0;
};

}  // namespace arbiter::store
